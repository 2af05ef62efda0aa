-- order-worker schema, migration 003: the shard map.
-- Applied by `order-worker migrate`; every statement is safe to run again.
-- Statements are separated by a line that ends with ';'.

-- One row (id = 1) on every shard of a sharded deployment: the bucket
-- count, the number of shards and this database's index among them, as
-- the last `migrate` wrote them. `run` compares it with mysql.shards and
-- refuses to start on any difference, so that a reordered, shortened or
-- lengthened list can never send a user to another shard than before.
-- An unsharded database keeps the table empty.
CREATE TABLE IF NOT EXISTS ow_shard_map (
    id           TINYINT      NOT NULL,
    bucket_count INT          NOT NULL,
    shard_count  INT          NOT NULL,
    shard_index  INT          NOT NULL,
    updated_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (id)
) ENGINE = InnoDB;
