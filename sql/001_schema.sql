-- order-worker schema, migration 001.
-- Applied by `order-worker migrate`; every statement is safe to run again.
-- Statements are separated by a line that ends with ';'.

-- One row per (user_id, idempotency_key): the decided request and the exact
-- response bytes every replay publishes. Rows are written once, in their
-- final state, by the transaction that decides them; there is no committed
-- in-progress state that a crash could leave behind.
CREATE TABLE IF NOT EXISTS idempotency_requests (
    id               BIGINT        NOT NULL COMMENT 'worker-generated, time ordered',
    user_id          BIGINT        NOT NULL,
    idempotency_key  VARBINARY(80) NOT NULL COMMENT 'byte-exact; no collation or padding',
    request_digest   BINARY(32)    NOT NULL COMMENT 'SHA-256 of the canonical request',
    status           ENUM('SUCCEEDED', 'FAILED') NOT NULL,
    response_status  SMALLINT      NOT NULL COMMENT '201 or 409',
    response_body    MEDIUMBLOB    NOT NULL COMMENT 'published byte for byte on every replay',
    created_at       DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at       DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    UNIQUE KEY uq_requests_user_key (user_id, idempotency_key),
    KEY ix_requests_created (created_at)
) ENGINE = InnoDB;

-- Orders. (user_id, external_order_no) is the business key: the database,
-- not the application, guarantees that one exists at most once.
CREATE TABLE IF NOT EXISTS orders (
    id                BIGINT        NOT NULL COMMENT 'worker-generated, time ordered',
    order_no          VARCHAR(24)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id           BIGINT        NOT NULL,
    external_order_no VARBINARY(64) NOT NULL COMMENT 'byte-exact; no collation or padding',
    amount            DECIMAL(12,2) NOT NULL,
    product_id        BIGINT        NULL,
    quantity          INT           NOT NULL,
    request_id        BIGINT        NULL COMMENT 'creating request; NULL once purged by retention',
    created_at        DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id),
    UNIQUE KEY uq_orders_order_no (order_no),
    UNIQUE KEY uq_orders_user_ext (user_id, external_order_no),
    KEY ix_orders_request (request_id),
    KEY ix_orders_created (created_at)
) ENGINE = InnoDB;
