-- The history database's tables (stairbench history; docs/history.md). Version 1:
-- `PRAGMA user_version` is 1 in a file made with them.
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    started_unix_s REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'cut_short')),
    status_reason TEXT,
    host TEXT NOT NULL,
    cpus INTEGER NOT NULL,
    kernel TEXT NOT NULL,
    stairbench_version TEXT NOT NULL,
    added_unix_s REAL NOT NULL
);
CREATE TABLE labels (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (run, key)
);
CREATE TABLE figures (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    target TEXT NOT NULL,
    placement TEXT NOT NULL,
    clients INTEGER NOT NULL,
    figure TEXT NOT NULL,
    mean REAL NOT NULL,
    stdev REAL NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (run, target, placement, clients, figure)
);
CREATE TABLE limits (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    target TEXT NOT NULL,
    placement TEXT NOT NULL,
    limit_name TEXT NOT NULL,
    PRIMARY KEY (run, target, placement)
);
CREATE INDEX runs_by_time ON runs (started_unix_s, id);
