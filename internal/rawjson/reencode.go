package rawjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// This file encodes a Go value against the encoding of an earlier one. A live state is typically a
// large value of which one field changed since the last publish; marshalling it whole costs far
// more than the change. Reencode walks the new value alongside the earlier text and compares
// instead of writing: a scalar is formatted into a small buffer and compared with the old token, a
// string is compared with the old token's bytes in place, a map is walked in the old text's key
// order (its keys looked up in the new map), and whatever differs is encoded by Marshal and spliced
// in. Every byte of the result is either compared against the new value or written from it, so a
// change anywhere is seen; what is saved is the writing, the map-key sorting and the allocation.
//
// The walk handles the shapes whose encoding it knows exactly: booleans, integers, floats,
// strings, pointers, interfaces, slices, arrays, maps with string keys, and structs whose exported
// fields have plain JSON names (with or without omitempty). Everything else — a type with its own
// MarshalJSON or MarshalText, json.Number, []byte, a struct with embedded fields or the ",string"
// or ",omitzero" options, other map keys — is encoded by Marshal on its own and compared whole.

// Reencode returns Marshal(v), given prev, the Marshal output (or an earlier Reencode result) for
// some earlier value, and prevType, that value's type (nil when unknown); same reports that the
// two encodings are byte-identical, and the result is then prev itself. prev is only read, and
// must not change while Reencode runs. An error is the error Marshal gives for v.
//
// When v has prevType, a float reached without passing through an interface is compared by value:
// the old token there was written from a float of the same type, so equal values have equal text.
func Reencode(v any, prev []byte, prevType reflect.Type) (out []byte, same bool, err error) {
	r, err := ReencodeTo(nil, v, prev, prevType)
	return r.Text, r.Same, err
}

// Reencoded is the outcome of [ReencodeTo].
type Reencoded struct {
	Text []byte // Marshal(v)
	Same bool   // Text is prev itself: the two encodings are byte-identical
	// Prefix and Suffix are lengths of a common prefix and a common suffix of prev and Text (not
	// necessarily the longest): the bytes outside the spliced parts.
	Prefix, Suffix int
}

// ReencodeTo is [Reencode] writing the new text into buf when its capacity suffices (buf must not
// overlap prev), and telling where the change lies.
func ReencodeTo(buf []byte, v any, prev []byte, prevType reflect.Type) (Reencoded, error) {
	if len(prev) == 0 {
		b, err := Marshal(v)
		return Reencoded{Text: b}, err
	}
	w := walker{prev: prev, static: prevType != nil && prevType == reflect.TypeOf(v)}
	if werr := w.walkTop(v); werr != nil || w.pos != len(prev) {
		b, err := Marshal(v) // the authority on errors and on what the walk gave up on
		if err == nil && bytes.Equal(b, prev) {
			return Reencoded{Text: prev, Same: true, Prefix: len(prev), Suffix: len(prev)}, nil
		}
		return Reencoded{Text: b}, err
	}
	if len(w.splices) == 0 {
		return Reencoded{Text: prev, Same: true, Prefix: len(prev), Suffix: len(prev)}, nil
	}
	n := len(prev)
	for _, s := range w.splices {
		n += len(s.text) - (s.to - s.from)
	}
	out := buf[:0]
	if cap(out) < n {
		out = make([]byte, 0, n+n/16) // room to grow, for when this buffer comes back
	}
	at := 0
	for _, s := range w.splices {
		out = append(out, prev[at:s.from]...)
		out = append(out, s.text...)
		at = s.to
	}
	out = append(out, prev[at:]...)
	return Reencoded{Text: out, Prefix: w.splices[0].from, Suffix: len(prev) - w.splices[len(w.splices)-1].to}, nil
}

// errGiveUp ends a walk; Reencode then marshals the whole value.
var errGiveUp = errors.New("rawjson: reencode gives up")

// maxOpaque bounds the values a walk marshals one by one: past it, one marshal of the whole value
// is cheaper than the calls' overhead (a state made of many time.Time values, say).
const maxOpaque = 2048

// maxWalkDepth bounds the walk's nesting (a pointer cycle would otherwise never end); Marshal
// reports the cycle.
const maxWalkDepth = 1000

type splice struct {
	from, to int // the old text replaced
	text     []byte
}

type walker struct {
	prev    []byte
	pos     int
	splices []splice
	num     [64]byte
	keys    map[reflect.Type]reflect.Value // a settable key value per map key type
	static  bool                           // the old token at pos encodes a value of the plan's type
	opaque  int                            // values marshalled one by one so far
}

func (w *walker) walkTop(v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errGiveUp
		}
	}()
	if v == nil {
		return w.leaf([]byte("null"))
	}
	rv := reflect.ValueOf(v)
	return w.value(planOf(rv.Type()), rv, 0)
}

// leaf compares text with the old token at pos; a difference replaces the old token.
func (w *walker) leaf(text []byte) error {
	p, end := w.pos, w.pos+len(text)
	if end <= len(w.prev) && string(w.prev[p:end]) == string(text) && (end == len(w.prev) || isDelim(w.prev[end])) {
		w.pos = end
		return nil
	}
	return w.replaceText(text)
}

func isDelim(c byte) bool { return c == ',' || c == ']' || c == '}' }

// replaceText splices text in place of the old value at pos.
func (w *walker) replaceText(text []byte) error {
	end, err := valueEnd(w.prev, w.pos)
	if err != nil {
		return errGiveUp
	}
	w.splices = append(w.splices, splice{from: w.pos, to: end, text: append([]byte(nil), text...)})
	w.pos = end
	return nil
}

// replace encodes v with Marshal and splices it in place of the old value at pos.
func (w *walker) replace(v reflect.Value) error {
	text, err := marshalValue(v)
	if err != nil {
		return errGiveUp
	}
	end, err := valueEnd(w.prev, w.pos)
	if err != nil {
		return errGiveUp
	}
	w.splices = append(w.splices, splice{from: w.pos, to: end, text: text})
	w.pos = end
	return nil
}

// marshalValue encodes v on its own as it is encoded in place: an addressable value through its
// address, so that methods on its pointer apply as they do when encoding/json reaches it.
func marshalValue(v reflect.Value) ([]byte, error) {
	var x any
	if v.CanAddr() {
		x = v.Addr().Interface()
	} else {
		x = v.Interface()
	}
	// json.Marshal reuses its buffers; its text differs from Marshal's only where it escaped '<',
	// '>' or '&', and then Marshal writes it.
	b, err := json.Marshal(x)
	if err != nil || !bytes.Contains(b, []byte(`\u00`)) {
		return b, err
	}
	return Marshal(x)
}

func (w *walker) expect(c byte) bool {
	if w.pos < len(w.prev) && w.prev[w.pos] == c {
		w.pos++
		return true
	}
	return false
}

// container restarts a container's walk after its shape turned out to differ: the splices made
// inside it are dropped and the whole value is replaced.
func (w *walker) container(start, mark int, v reflect.Value) error {
	w.splices = w.splices[:mark]
	w.pos = start
	return w.replace(v)
}

func (w *walker) value(p *plan, v reflect.Value, depth int) error {
	if depth > maxWalkDepth {
		return errGiveUp
	}
	switch p.kind {
	case kBool:
		if v.Bool() {
			return w.leaf([]byte("true"))
		}
		return w.leaf([]byte("false"))
	case kInt:
		return w.leaf(strconv.AppendInt(w.num[:0], v.Int(), 10))
	case kUint:
		return w.leaf(strconv.AppendUint(w.num[:0], v.Uint(), 10))
	case kFloat32, kFloat64:
		if w.static && w.sameFloat(v.Float(), p.kind) {
			return nil
		}
		b, ok := appendFloat(w.num[:0], v.Float(), p.kind)
		if !ok {
			return errGiveUp
		}
		return w.leaf(b)
	case kString:
		s := v.String()
		q := w.pos + 1 + len(s)
		if q < len(w.prev) && w.prev[w.pos] == '"' && w.prev[q] == '"' &&
			string(w.prev[w.pos+1:q]) == s && strings.IndexByte(s, '\\') < 0 {
			// The old token is '"' s '"' with no escape in it: encoding/json wrote s unescaped, so
			// s needs none and encodes to the same bytes.
			w.pos = q + 1
			return nil
		}
		b, err := Marshal(s)
		if err != nil {
			return errGiveUp
		}
		return w.leaf(b)
	case kOpaque:
		if w.opaque++; w.opaque > maxOpaque {
			return errGiveUp
		}
		b, err := marshalValue(v)
		if err != nil {
			return errGiveUp
		}
		return w.leaf(b)
	case kPointer:
		if v.IsNil() {
			return w.leaf([]byte("null"))
		}
		return w.value(p.elem, v.Elem(), depth+1)
	case kInterface:
		if v.IsNil() {
			return w.leaf([]byte("null"))
		}
		e := v.Elem()
		static := w.static
		w.static = false // the old value here may have had another dynamic type
		err := w.value(planOf(e.Type()), e, depth+1)
		w.static = static
		return err
	case kSlice, kArray:
		if p.kind == kSlice && v.IsNil() {
			return w.leaf([]byte("null"))
		}
		return w.array(p, v, depth)
	case kMap:
		if v.IsNil() {
			return w.leaf([]byte("null"))
		}
		return w.object(p, v, depth)
	case kStruct:
		return w.structure(p, v, depth)
	}
	return errGiveUp
}

func (w *walker) array(p *plan, v reflect.Value, depth int) error {
	start, mark := w.pos, len(w.splices)
	if !w.expect('[') {
		return w.container(start, mark, v)
	}
	n := v.Len()
	for i := range n {
		if w.pos < len(w.prev) && w.prev[w.pos] == ']' {
			// The old array ends here: the rest of the new elements are inserted before its ']'.
			var text []byte
			for j := i; j < n; j++ {
				b, err := marshalValue(v.Index(j))
				if err != nil {
					return errGiveUp
				}
				if j > 0 {
					text = append(text, ',')
				}
				text = append(text, b...)
			}
			w.splices = append(w.splices, splice{from: w.pos, to: w.pos, text: text})
			break
		}
		if i > 0 && !w.expect(',') {
			return w.container(start, mark, v)
		}
		if err := w.value(p.elem, v.Index(i), depth+1); err != nil {
			return err
		}
	}
	if w.pos < len(w.prev) && w.prev[w.pos] != ']' {
		// The old array is longer: its remaining elements (from the ',' before the first) go.
		from := w.pos
		for w.pos < len(w.prev) && w.prev[w.pos] != ']' {
			if n > 0 || w.pos > from {
				if !w.expect(',') {
					return errGiveUp
				}
			}
			end, err := valueEnd(w.prev, w.pos)
			if err != nil {
				return errGiveUp
			}
			w.pos = end
		}
		w.splices = append(w.splices, splice{from: from, to: w.pos})
	}
	if !w.expect(']') {
		return errGiveUp
	}
	return nil
}

// object walks a map in the old text's key order: each old key is looked up in the new map; when
// every old key is found and the counts agree, the key sets are equal and so is their sorted order.
func (w *walker) object(p *plan, v reflect.Value, depth int) error {
	start, mark := w.pos, len(w.splices)
	if !w.expect('{') {
		return w.container(start, mark, v)
	}
	key, ok := w.keys[p.key]
	if !ok {
		key = reflect.New(p.key).Elem()
		if w.keys == nil {
			w.keys = map[reflect.Type]reflect.Value{}
		}
		w.keys[p.key] = key
	}
	n := 0
	for w.pos < len(w.prev) && w.prev[w.pos] != '}' {
		if n > 0 && !w.expect(',') {
			return errGiveUp
		}
		ks := w.pos
		if ks >= len(w.prev) || w.prev[ks] != '"' {
			return errGiveUp
		}
		ke := ks + 1
		for ke < len(w.prev) && w.prev[ke] != '"' && w.prev[ke] != '\\' {
			ke++
		}
		if ke >= len(w.prev) || w.prev[ke] != '"' {
			return w.container(start, mark, v) // an escaped key: not worth reading here
		}
		// The key aliases prev, which does not change during the walk; it is used for lookups only.
		var k string
		if ke > ks+1 {
			k = unsafe.String(&w.prev[ks+1], ke-ks-1)
		}
		key.SetString(k)
		mv := v.MapIndex(key)
		if !mv.IsValid() {
			return w.container(start, mark, v)
		}
		w.pos = ke + 1
		if !w.expect(':') {
			return errGiveUp
		}
		if err := w.value(p.elem, mv, depth+1); err != nil {
			return err
		}
		n++
	}
	if n != v.Len() || !w.expect('}') {
		return w.container(start, mark, v)
	}
	return nil
}

func (w *walker) structure(p *plan, v reflect.Value, depth int) error {
	start, mark := w.pos, len(w.splices)
	if !w.expect('{') {
		return w.container(start, mark, v)
	}
	first := true
	for i := range p.fields {
		f := &p.fields[i]
		fv := v.Field(f.index)
		if f.omitEmpty && isEmpty(fv) {
			continue
		}
		if !first && !w.expect(',') {
			return w.container(start, mark, v)
		}
		first = false
		if end := w.pos + len(f.key); end > len(w.prev) || string(w.prev[w.pos:end]) != f.key {
			return w.container(start, mark, v)
		}
		w.pos += len(f.key)
		if err := w.value(f.plan, fv, depth+1); err != nil {
			return err
		}
	}
	if !w.expect('}') {
		return w.container(start, mark, v)
	}
	return nil
}

// sameFloat reports whether the old token at pos, written from a float of kind k, holds f; if so it
// moves past it. A float's text is a function of its value (shortest round-trip digits), so equal
// values, -0 told apart from 0, have equal text.
func (w *walker) sameFloat(f float64, k kind) bool {
	end := w.pos
	for end < len(w.prev) && (w.prev[end] >= '0' && w.prev[end] <= '9' || w.prev[end] == '-' || w.prev[end] == '.' || w.prev[end] == 'e' || w.prev[end] == 'E' || w.prev[end] == '+') {
		end++
	}
	if end == w.pos {
		return false
	}
	if is, decided := floatTokenIs(w.prev[w.pos:end], f, k); decided {
		if is {
			w.pos = end
		}
		return is
	}
	bits := 64
	if k == kFloat32 {
		bits = 32
	}
	old, err := strconv.ParseFloat(unsafe.String(&w.prev[w.pos], end-w.pos), bits)
	if err != nil || old != f || math.Signbit(old) != math.Signbit(f) {
		return false
	}
	w.pos = end
	return true
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// appendFloat formats f as encoding/json does (ES6 number formatting: shortest round-trip digits,
// exponent form below 1e-6 and from 1e21, a one-digit negative exponent without leading zero).
// ok is false for NaN and infinities, which JSON cannot hold.
func appendFloat(b []byte, f float64, k kind) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	bits := 64
	if k == kFloat32 {
		bits = 32
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

type kind uint8

const (
	kOpaque kind = iota
	kBool
	kInt
	kUint
	kFloat32
	kFloat64
	kString
	kPointer
	kInterface
	kSlice
	kArray
	kMap
	kStruct
)

// plan is how the walk encodes one Go type.
type plan struct {
	kind   kind
	elem   *plan        // pointer, slice, array, map
	key    reflect.Type // map
	fields []field      // struct, in encoding order
}

type field struct {
	index     int
	key       string // `"name":`
	omitEmpty bool
	plan      *plan
}

var plans sync.Map // reflect.Type → *plan

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	numberType        = reflect.TypeFor[json.Number]()
)

func planOf(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	p := buildPlan(t, map[reflect.Type]*plan{})
	plans.Store(t, p)
	return p
}

func hasMarshaler(t reflect.Type) bool {
	if t.Implements(marshalerType) || t.Implements(textMarshalerType) {
		return true
	}
	if t.Kind() != reflect.Pointer {
		pt := reflect.PointerTo(t)
		return pt.Implements(marshalerType) || pt.Implements(textMarshalerType)
	}
	return false
}

func buildPlan(t reflect.Type, building map[reflect.Type]*plan) *plan {
	if p, ok := building[t]; ok {
		return p
	}
	if t == numberType || hasMarshaler(t) {
		return &plan{kind: kOpaque}
	}
	p := &plan{}
	building[t] = p
	switch t.Kind() {
	case reflect.Bool:
		p.kind = kBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.kind = kInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		p.kind = kUint
	case reflect.Float32:
		p.kind = kFloat32
	case reflect.Float64:
		p.kind = kFloat64
	case reflect.String:
		p.kind = kString
	case reflect.Pointer:
		p.kind, p.elem = kPointer, buildPlan(t.Elem(), building)
	case reflect.Interface:
		p.kind = kInterface
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 { // []byte is base64 text
			p.kind, p.elem = kSlice, buildPlan(t.Elem(), building)
		}
	case reflect.Array:
		p.kind, p.elem = kArray, buildPlan(t.Elem(), building)
	case reflect.Map:
		if t.Key().Kind() == reflect.String {
			p.kind, p.key, p.elem = kMap, t.Key(), buildPlan(t.Elem(), building)
		}
	case reflect.Struct:
		if fs, ok := structFields(t, building); ok {
			p.kind, p.fields = kStruct, fs
		}
	}
	return p
}

// structFields lists t's encoded fields when every one of them has a plain name; ok is false for
// the cases left to encoding/json (embedded fields, the string and omitzero options, unusual or
// repeated names).
func structFields(t reflect.Type, building map[reflect.Type]*plan) ([]field, bool) {
	var out []field
	seen := map[string]bool{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil, false
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		omit := false
		for opts != "" {
			var o string
			o, opts, _ = strings.Cut(opts, ",")
			switch o {
			case "omitempty":
				omit = true
			case "":
			default:
				return nil, false // string, omitzero, or an option a later encoding/json may know
			}
		}
		if name == "" {
			name = sf.Name
		}
		if !plainName(name) || seen[name] {
			return nil, false
		}
		seen[name] = true
		out = append(out, field{index: i, key: `"` + name + `":`, omitEmpty: omit, plan: buildPlan(sf.Type, building)})
	}
	return out, true
}

// plainName reports whether name is a JSON name encoding/json accepts as a tag and writes without
// escapes, from a narrow set: ASCII letters, digits, '_', '-' and '.'.
func plainName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return true
}
