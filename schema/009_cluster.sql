-- 009_cluster: the nodes of a cluster (docs/design.md section 15) and the placement each
-- run got.
-- nodes: one row per ddpbenchd the leader has known (the leader itself and every follower
-- that joined), written only by the leader: what it offered when it joined (slots, GPUs,
-- engines, network profile), its state (up, draining, lost, left) and when it last synced.
-- A restarted leader reads the rows back as lost until each follower joins again.
-- runs.nodes / runs.ranks_per_node: how many nodes the run's ranks spanned and the most
-- ranks any one of them held; NULL for runs stored before (all on one node). Results key
-- on both, as on network_profile: 4 ranks on 2 nodes are not samples of 4 ranks on 1.
CREATE TABLE nodes (
    name              TEXT PRIMARY KEY,
    address           TEXT NOT NULL,
    role              TEXT NOT NULL CHECK (role IN ('leader', 'follower')),
    cpu_slots         INTEGER NOT NULL,
    gpus              INTEGER NOT NULL,
    engines           TEXT NOT NULL DEFAULT '{}',
    network_profile   TEXT,
    state             TEXT NOT NULL CHECK (state IN ('up', 'draining', 'lost', 'left')),
    joined_at         REAL NOT NULL,
    last_heartbeat_at REAL
);
ALTER TABLE runs ADD COLUMN nodes INTEGER;
ALTER TABLE runs ADD COLUMN ranks_per_node INTEGER;
