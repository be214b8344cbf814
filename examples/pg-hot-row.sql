UPDATE t SET v = v + 1 WHERE id = 1;
