-- ow_bucket(user_id, bucket_count): a user's bucket in SQL, the
-- same FNV-1a 64 over the user id's decimal digits as order-worker computes
-- (docs/contract.md, "Shard routing"); the shard of a user under N shards is
-- MOD(ow_bucket(user_id, 4096), N). Used by scripts/reshard.sh to select and
-- delete the rows whose bucket moves; handy for an operator's own checks:
--
--   mariadb -u root orders < sql/ow_bucket.sql
--   SELECT COUNT(*) FROM orders WHERE MOD(ow_bucket(user_id, 4096), 6) >= 3;
--
-- The arithmetic is exact: the product is computed in DECIMAL(65,0), which
-- holds 2^64 times the FNV prime, and reduced modulo 2^64 before the next
-- XOR (a BIGINT UNSIGNED multiplication would overflow). Needs CREATE
-- ROUTINE; the statement separator is // as in the mariadb client's
-- DELIMITER.
DROP FUNCTION IF EXISTS ow_bucket;
DELIMITER //
CREATE FUNCTION ow_bucket(u BIGINT, b INT) RETURNS INT DETERMINISTIC
BEGIN
  DECLARE s VARCHAR(20) DEFAULT CAST(u AS CHAR);
  DECLARE h DECIMAL(65,0) DEFAULT 14695981039346656037;
  DECLARE i INT DEFAULT 1;
  WHILE i <= CHAR_LENGTH(s) DO
    SET h = MOD(CAST(CAST(h AS UNSIGNED) ^ ASCII(SUBSTRING(s, i, 1)) AS DECIMAL(65,0))
                * 1099511628211, 18446744073709551616);
    SET i = i + 1;
  END WHILE;
  RETURN MOD(h, b);
END//
DELIMITER ;
