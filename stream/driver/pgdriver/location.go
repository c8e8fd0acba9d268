package pgdriver

import "github.com/foldstream/foldstream/stream/driver"

var _ driver.Locator = (*Driver)(nil)

// Location returns the database's URL with its password removed (see [driver.Locator]).
func (d *Driver) Location() string { return Redacted(d.cfg.URL) }
