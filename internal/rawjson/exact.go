package rawjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// UnmarshalExact is json.Unmarshal with object keys matched to struct fields exactly. json.Unmarshal
// folds case: it would set a field tagged "amount" from a key "AMOUNT" (the last of such keys
// winning), so a decoded value could differ from what a JSON Schema validated key by key. Here a
// key that is not exactly a field's JSON name is an unknown field and is dropped, at every depth
// (struct fields, slice and array elements, map values, pointers). Values of types with their own
// UnmarshalJSON or UnmarshalText, and interface values, get their text unchanged.
func UnmarshalExact(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return json.Unmarshal(data, v) // let encoding/json report the misuse
	}
	return json.Unmarshal(KeepExactKeys(data, t.Elem()), v)
}

// KeepExactKeys returns data without the object members that decoding into a value of type t would
// fold onto a struct field whose JSON name differs from the key (see [UnmarshalExact]). It returns
// data itself when nothing is dropped or data is not well-formed.
func KeepExactKeys(data []byte, t reflect.Type) []byte {
	out, changed := filterExact(bytes.TrimSpace(data), shapeOf(t))
	if !changed {
		return data
	}
	return out
}

// shape is what exact-key filtering needs to know of a Go type: for a struct, its fields' exact
// JSON names; for a container, its element's shape. A nil shape keeps the text as it is.
type shape struct {
	fields map[string]*shape // struct: JSON name → field shape
	elem   *shape            // slice, array or map: element shape
	kind   byte              // '{' struct, '[' slice or array, 'm' map
}

var shapes sync.Map // reflect.Type → *shape

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func shapeOf(t reflect.Type) *shape {
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	s := buildShape(t, map[reflect.Type]*shape{})
	shapes.Store(t, s)
	return s
}

func buildShape(t reflect.Type, building map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	if s, ok := building[t]; ok {
		return s // a recursive type: the shape being built
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &shape{kind: '{', fields: map[string]*shape{}}
		building[t] = s
		addFields(s, t, building, map[reflect.Type]bool{})
		return s
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nil // []byte is a base64 string
		}
		s := &shape{kind: '['}
		building[t] = s
		s.elem = buildShape(t.Elem(), building)
		return s
	case reflect.Map:
		s := &shape{kind: 'm'}
		building[t] = s
		s.elem = buildShape(t.Elem(), building)
		return s
	}
	return nil
}

// addFields records the JSON names encoding/json gives t's fields, promoting the fields of
// untagged embedded structs. It may record a name encoding/json then ignores as ambiguous: keeping
// such a key is harmless, because encoding/json matches an exact name before a folded one.
func addFields(s *shape, t reflect.Type, building map[reflect.Type]*shape, seen map[reflect.Type]bool) {
	if seen[t] {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				addFields(s, et, building, seen)
				continue
			}
		}
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		if !f.IsExported() {
			continue // an unexported embedded non-struct is ignored by encoding/json
		}
		if name == "" {
			name = f.Name
		}
		s.fields[name] = buildShape(ft, building)
	}
}

// filterExact returns b filtered by sh and whether anything changed.
func filterExact(b []byte, sh *shape) ([]byte, bool) {
	if sh == nil {
		return b, false
	}
	switch k := rawKind(b); {
	case k == '{' && (sh.kind == '{' || sh.kind == 'm'):
		ms, err := objectMembers(b)
		if err != nil {
			return b, false
		}
		changed := false
		keep := make([]bool, len(ms))
		vals := make([][]byte, len(ms))
		for i, m := range ms {
			fs := sh.elem
			if sh.kind == '{' {
				var ok bool
				if fs, ok = sh.fields[m.key]; !ok {
					changed = true
					continue
				}
			}
			keep[i] = true
			var c bool
			vals[i], c = filterExact(m.val, fs)
			changed = changed || c
		}
		if !changed {
			return b, false
		}
		var out bytes.Buffer
		out.WriteByte('{')
		first := true
		for i, m := range ms {
			if !keep[i] {
				continue
			}
			if !first {
				out.WriteByte(',')
			}
			first = false
			key, _ := json.Marshal(m.key)
			out.Write(key)
			out.WriteByte(':')
			out.Write(vals[i])
		}
		out.WriteByte('}')
		return out.Bytes(), true
	case k == '[' && sh.kind == '[':
		es, err := arrayElems(b)
		if err != nil {
			return b, false
		}
		changed := false
		vals := make([][]byte, len(es))
		for i, e := range es {
			var c bool
			vals[i], c = filterExact(e, sh.elem)
			changed = changed || c
		}
		if !changed {
			return b, false
		}
		return append(append([]byte{'['}, bytes.Join(vals, []byte{','})...), ']'), true
	}
	return b, false
}
