package server

import "testing"

// firstElements cuts a page's JSON array after n messages, whatever the messages hold.
func TestFirstElementsCutsAJSONArrayAfterNMessages(t *testing.T) {
	body := []byte(`[{"a":"x,]}"},[1,[2]],"q\"\\",3,{"b":{"c":[4,5]}}]`)
	for n, want := range []string{
		`[]`,
		`[{"a":"x,]}"}]`,
		`[{"a":"x,]}"},[1,[2]]]`,
		`[{"a":"x,]}"},[1,[2]],"q\"\\"]`,
		`[{"a":"x,]}"},[1,[2]],"q\"\\",3]`,
		string(body),
	} {
		got, err := firstElements(body, n)
		if err != nil || string(got) != want {
			t.Errorf("firstElements(%d) = %s, %v; want %s", n, got, err, want)
		}
	}
	if _, err := firstElements(body, 6); err == nil {
		t.Error("firstElements(6) of 5 messages: no error")
	}
}
