-- 008_network_profile: runs.network_profile names the network a run measured over: the
-- daemon's --network-profile at submit (deploy/netlab.sh starts each emulated host's
-- daemon with its tc profile: 1gbe, 10gbe, 25gbe, unshaped). NULL: the host network as
-- is, which every run stored before this migration used. Results keep runs of different
-- profiles apart, as they keep oversubscribed runs apart (daemon/results.c).
ALTER TABLE runs ADD COLUMN network_profile TEXT;
