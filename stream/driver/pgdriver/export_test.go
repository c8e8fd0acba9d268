package pgdriver

// WriteRoundTrips returns how many round trips d's write transactions have taken to the database
// so far (docs/postgres.md#writes-round-trips).
func WriteRoundTrips(d *Driver) int64 { return d.writeRoundTrips.Load() }
