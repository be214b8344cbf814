-- One transaction of examples/limits-disk.toml: 10 ms of the application's own work (the
-- client's \sleep), then a 4000-byte value stored uncompressed, committed synchronously.
\sleep 10 ms
INSERT INTO t (v) VALUES (convert_to(repeat('x', 4000), 'UTF8'));
