BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT abalance FROM pgbench_accounts WHERE aid = 1;
SELECT pg_sleep(0.001);
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1;
END;
