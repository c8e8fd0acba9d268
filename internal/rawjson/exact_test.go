package rawjson_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/foldstream/foldstream/internal/rawjson"
)

type inner struct {
	Amount int `json:"amount"`
}

type Embedded struct {
	Note string `json:"note"`
}

type outer struct {
	Embedded
	Inner  inner            `json:"inner"`
	List   []inner          `json:"list"`
	ByName map[string]inner `json:"byName"`
	Ptr    *inner           `json:"ptr"`
	Any    any              `json:"any"`
	Raw    json.RawMessage  `json:"raw"`
	Plain  int
	Self   *outer `json:"self"`
}

func TestUnmarshalExactIgnoresKeysThatOnlyFoldOntoAField(t *testing.T) {
	t.Parallel()
	in := `{"note":"n","NOTE":"x","inner":{"amount":5,"AMOUNT":-100},"list":[{"Amount":7,"amount":1}],
		"byName":{"K":{"amount":2,"aMount":3}},"ptr":{"amount":4,"Amount":"n/a"},"any":{"A":1,"a":2},
		"raw":{"X":1},"Plain":9,"plain":10,"self":{"inner":{"amount":6,"AMOUNT":-1}},"INNER":{"amount":-5}}`
	var got outer
	if err := rawjson.UnmarshalExact([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	want := outer{Embedded: Embedded{Note: "n"}, Inner: inner{5}, List: []inner{{1}},
		ByName: map[string]inner{"K": {2}}, Ptr: &inner{4}, Any: map[string]any{"A": 1.0, "a": 2.0},
		Raw: json.RawMessage(`{"X":1}`), Plain: 9, Self: &outer{Inner: inner{6}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestUnmarshalExactAgreesWithUnmarshalWhereNoKeyFolds(t *testing.T) {
	t.Parallel()
	in := []byte(`{"inner": {"amount": 1}, "unknown": {"Amount": 2}, "list": [], "any": [1, "x"]}`)
	var a, b outer
	_ = json.Unmarshal(in, &a)
	_ = rawjson.UnmarshalExact(in, &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("exact decoding differs where no key folds: %+v vs %+v", a, b)
	}
}
