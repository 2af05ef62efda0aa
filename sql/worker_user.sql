-- Creates (or updates) the database user the worker runs as, with only the
-- privileges it needs: SELECT, INSERT, UPDATE and DELETE on the two tables
-- (DELETE on idempotency_requests for `order-worker purge`, retention; on
-- orders for the deciding transaction, which takes back the new orders of a
-- request that conflicts); SELECT on ow_shard_map and ow_schema_migrations
-- (every connection reads them as it connects).
-- Run it as an administrator after `order-worker migrate`, with three
-- session variables set, for example:
--
--   mariadb -u root -e "SET @worker_user='order_worker', @worker_host='%',
--       @worker_password='...', @worker_database='orders';
--       SOURCE sql/worker_user.sql;"
--
-- TLS: set @worker_require to 'SSL' (the account may only log in
-- over TLS) or 'X509' (over TLS with a client certificate signed by a CA the
-- server trusts, i.e. mysql.ssl_cert and mysql.ssl_key); unset or 'NONE'
-- keeps plaintext allowed. Any other value stops the script. Example:
--
--   mariadb -u root --ssl-ca=ca.crt -e "SET @worker_user='order_worker',
--       @worker_host='%', @worker_password='...', @worker_database='orders',
--       @worker_require='X509'; SOURCE sql/worker_user.sql;"
--
-- Works on MariaDB 10.11 and MySQL 8. Identifiers and the password are
-- quoted by the server (QUOTE / backtick escaping), never pasted raw.

SET @ow_account = CONCAT(QUOTE(@worker_user), '@', QUOTE(@worker_host));
SET @ow_db = CONCAT('`', REPLACE(@worker_database, '`', '``'), '`');

SET @ow_sql = CONCAT('CREATE USER IF NOT EXISTS ', @ow_account,
                     ' IDENTIFIED BY ', QUOTE(@worker_password));
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

-- A re-run also resets the password and the TLS requirement. An unknown
-- @worker_require leaves @ow_require NULL, so the PREPARE below fails.
SET @ow_require = CASE UPPER(COALESCE(@worker_require, 'NONE'))
                  WHEN 'NONE' THEN 'NONE' WHEN 'SSL' THEN 'SSL' WHEN 'X509' THEN 'X509' END;
SET @ow_sql = CONCAT('ALTER USER ', @ow_account, ' IDENTIFIED BY ', QUOTE(@worker_password),
                     ' REQUIRE ', @ow_require);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

SET @ow_sql = CONCAT('GRANT SELECT, INSERT, UPDATE, DELETE ON ', @ow_db,
                     '.idempotency_requests TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

SET @ow_sql = CONCAT('GRANT SELECT, INSERT, UPDATE, DELETE ON ', @ow_db, '.orders TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

-- The shard map (migration 003): every connection reads it as it connects.
SET @ow_sql = CONCAT('GRANT SELECT ON ', @ow_db, '.ow_shard_map TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

-- The schema's version, which every connection checks against the binary's.
SET @ow_sql = CONCAT('GRANT SELECT ON ', @ow_db, '.ow_schema_migrations TO ', @ow_account);
PREPARE ow_stmt FROM @ow_sql;
EXECUTE ow_stmt;
DEALLOCATE PREPARE ow_stmt;

SET @ow_sql = NULL, @ow_account = NULL, @ow_db = NULL, @ow_require = NULL,
    @worker_password = NULL;
