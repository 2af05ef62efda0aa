-- Creates (or updates) the database user of the result query service
-- (`order-worker serve`): SELECT on the two tables, the shard map and the
-- schema's version (every connection checks them) and nothing else, so that
-- the HTTP side can never change a record or an order.
-- Run it as an administrator after `order-worker migrate`, with four
-- session variables set, for example:
--
--   mariadb -u root -e "SET @api_user='order_worker_api', @api_host='%',
--       @api_password='...', @api_database='orders';
--       SOURCE sql/api_user.sql;"
--
-- Works on MariaDB 10.11 and MySQL 8. Identifiers and the password are
-- quoted by the server (QUOTE / backtick escaping), never pasted raw.

SET @ow_account = CONCAT(QUOTE(@api_user), '@', QUOTE(@api_host));
SET @ow_db = CONCAT('`', REPLACE(@api_database, '`', '``'), '`');

SET @ow_sql = CONCAT('CREATE USER IF NOT EXISTS ', @ow_account,
                     ' IDENTIFIED BY ', QUOTE(@api_password));
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

-- A re-run also resets the password.
SET @ow_sql = CONCAT('ALTER USER ', @ow_account, ' IDENTIFIED BY ', QUOTE(@api_password));
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

SET @ow_sql = CONCAT('GRANT SELECT ON ', @ow_db, '.idempotency_requests TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

SET @ow_sql = CONCAT('GRANT SELECT ON ', @ow_db, '.orders TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

SET @ow_sql = CONCAT('GRANT SELECT ON ', @ow_db, '.ow_shard_map TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

-- The schema's version, which every connection checks against the binary's.
SET @ow_sql = CONCAT('GRANT SELECT ON ', @ow_db, '.ow_schema_migrations TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

SET @ow_sql = NULL, @ow_account = NULL, @ow_db = NULL, @api_password = NULL;
