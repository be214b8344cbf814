-- One transaction of examples/limits-disk.toml: 50 ms of the application's own work (the
-- client's \sleep), then a 64000-byte value stored uncompressed, committed synchronously.
\sleep 50 ms
INSERT INTO t (v) VALUES (convert_to(repeat('x', 64000), 'UTF8'));
