package driver

// Capabilities is what a [Driver] offers beyond its interface, in one value: each field is the
// driver seen through the optional interface it implements, or nil when it does not. The store
// reads it once when it opens ([CapabilitiesOf]); a new driver states what it can do by the
// interfaces it implements, and finds the whole list here.
//
// Transactions have optional interfaces of their own, which the store asks each transaction for:
// a write transaction may be a [HidingTx], [LockKeeper], [EarlyCommitWatcher] (its Writer),
// [StreamPrefetcher], [StreamExpecter], [FreshStreamInserter], [ProcessorOpsTx] or
// [ParkedEventsTx]; a read transaction a [SizedRecordsReader], [CheckpointRowsReader],
// [StreamlessCheckpointFinder], [ProcessorOpsReader] or [ParkedEventsReader].
type Capabilities struct {
	// LeaseWatcher announces released leases (a process waiting for one takes it at once).
	LeaseWatcher LeaseWatcher
	// LeaseBatchReleaser gives several leases up in one round trip.
	LeaseBatchReleaser LeaseBatchReleaser
	// ErrorClassifier turns the database's errors into the store's coded ones.
	ErrorClassifier ErrorClassifier
	// Locator names the database for logs and messages.
	Locator Locator
	// PoolStats reports the connection pool's figures (metrics).
	PoolStats PoolStatser
	// ListenBarrier proves that every other process's commit before a call was heard.
	ListenBarrier ListenBarrier
	// CommitProber checks whether commits go through while they stall.
	CommitProber CommitProber
}

// CapabilitiesOf returns d's capabilities.
func CapabilitiesOf(d Driver) Capabilities {
	var c Capabilities
	c.LeaseWatcher, _ = d.(LeaseWatcher)
	c.LeaseBatchReleaser, _ = d.(LeaseBatchReleaser)
	c.ErrorClassifier, _ = d.(ErrorClassifier)
	c.Locator, _ = d.(Locator)
	c.PoolStats, _ = d.(PoolStatser)
	c.ListenBarrier, _ = d.(ListenBarrier)
	c.CommitProber, _ = d.(CommitProber)
	return c
}
