\sleep 2 ms
BEGIN;
UPDATE t SET v = v + 1 WHERE id = 1;
\sleep 500 us
COMMIT;
