package pgdriver

import (
	"encoding/json"
	"testing"
)

// A node drops its own notifications without decoding them, telling them by the sender's id that
// wireNote marshals first; any other sender's, or a payload it cannot tell, is decoded as before.
func TestOwnNotificationsAreToldByTheirFirstMember(t *testing.T) {
	marshal := func(w wireNote) string {
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	const node = "0123456789abcdef"
	for _, c := range []struct {
		name    string
		payload string
		own     bool
	}{
		{"own, with streams", marshal(wireNote{Node: node, Streams: []wireStream{{ID: 1, Path: "/a"}}}), true},
		{"own, empty", marshal(wireNote{Node: node}), true},
		{"own, a lease released", marshal(wireNote{Node: node, Released: []string{"k"}, Holder: "h"}), true},
		{"another node", marshal(wireNote{Node: "fedcba9876543210", Streams: []wireStream{{ID: 1}}}), false},
		{"an id this one starts", marshal(wireNote{Node: node + "00"}), false},
		{"an id that starts this one", marshal(wireNote{Node: node[:8]}), false},
		{"not a note", `{"x":1}`, false},
		{"empty", ``, false},
	} {
		if got := ownNote(c.payload, node); got != c.own {
			t.Errorf("%s: ownNote(%s) = %v, want %v", c.name, c.payload, got, c.own)
		}
	}
}
