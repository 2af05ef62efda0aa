-- order-worker schema, migration 002: drops two indexes of
-- `orders` that serve no query and cost every insert.
--   ix_orders_created: no statement reads orders by creation time; the
--     purge walks idempotency_requests.ix_requests_created and reaches
--     orders through ix_orders_request.
--   uq_orders_order_no: order_no is a fixed-width base-32 spelling of the
--     primary key id (ow_order_no_format), so the primary key already
--     makes it unique, and nothing looks an order up by it.
-- MySQL 8 has no DROP INDEX IF EXISTS (MariaDB has): `migrate` counts a
-- drop of an index that is already gone (error 1091) as done, so running
-- this again, or on a database created without these indexes, is safe.
ALTER TABLE orders DROP INDEX ix_orders_created;
ALTER TABLE orders DROP INDEX uq_orders_order_no;
