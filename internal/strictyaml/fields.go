package strictyaml

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// field is one struct field as the decoder and the schema see it.
type field struct {
	name      string
	index     []int
	typ       reflect.Type
	keyed     bool // a slice decoded from a name → element mapping
	required  bool
	shorthand bool
	enum      []string
	min, max  *float64 // for durations, in nanoseconds
	pattern   *regexp.Regexp
	oneof     string
	ipv6      bool // netip fields: IPv6 is accepted too (tag ipv6:"true")
	doc       string
	example   string
}

// structInfo is a struct type's fields, parsed once.
type structInfo struct {
	fields    []*field
	byName    map[string]*field
	key       *field // the ",key" field of a keyed element, if any
	shorthand *field
	groups    []string // oneof groups in field order
}

var infoCache sync.Map // reflect.Type → *structInfo

var (
	durationType = reflect.TypeFor[time.Duration]()
	addrType     = reflect.TypeFor[netip.Addr]()
	prefixType   = reflect.TypeFor[netip.Prefix]()
	addrPortType = reflect.TypeFor[netip.AddrPort]()
)

// infoOf returns t's field table. Malformed tags are programming errors
// and panic the first time the type is used, which every test does.
func infoOf(t reflect.Type) *structInfo {
	if si, ok := infoCache.Load(t); ok {
		return si.(*structInfo)
	}
	si := &structInfo{byName: map[string]*field{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("yaml")
		if !ok || tag == "-" || !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if opts == "inline" {
			if sf.Type.Kind() != reflect.Struct {
				panic(fmt.Sprintf("strictyaml: %s.%s: inline needs a struct", t, sf.Name))
			}
			for _, inner := range infoOf(sf.Type).fields {
				c := *inner
				c.index = append(append([]int{}, sf.Index...), inner.index...)
				if c.oneof != "" && !contains(si.groups, c.oneof) {
					si.groups = append(si.groups, c.oneof)
				}
				si.fields = append(si.fields, &c)
				si.byName[c.name] = &c
			}
			continue
		}
		f := &field{
			name: name, index: sf.Index, typ: sf.Type,
			required: sf.Tag.Get("required") == "true",
			oneof:    sf.Tag.Get("oneof"),
			ipv6:     sf.Tag.Get("ipv6") == "true",
			doc:      sf.Tag.Get("doc"),
			example:  sf.Tag.Get("example"),
		}
		switch opts {
		case "":
		case "keyed":
			if sf.Type.Kind() != reflect.Slice || sf.Type.Elem().Kind() != reflect.Struct {
				panic(fmt.Sprintf("strictyaml: %s.%s: keyed needs a slice of structs", t, sf.Name))
			}
			f.keyed = true
		case "key":
			if sf.Type.Kind() != reflect.String {
				panic(fmt.Sprintf("strictyaml: %s.%s: key needs a string", t, sf.Name))
			}
			si.key = f
		case "shorthand":
			f.shorthand = true
			si.shorthand = f
		default:
			panic(fmt.Sprintf("strictyaml: %s.%s: unknown option %q", t, sf.Name, opts))
		}
		if e := sf.Tag.Get("enum"); e != "" {
			f.enum = strings.Split(e, "|")
		}
		if p := sf.Tag.Get("pattern"); p != "" {
			f.pattern = regexp.MustCompile(p)
		}
		f.min = parseBound(t, sf, "min")
		f.max = parseBound(t, sf, "max")
		if f.oneof != "" && !contains(si.groups, f.oneof) {
			si.groups = append(si.groups, f.oneof)
		}
		if opts != "key" {
			if name == "" {
				panic(fmt.Sprintf("strictyaml: %s.%s: empty key", t, sf.Name))
			}
			si.fields = append(si.fields, f)
			si.byName[name] = f
		}
	}
	actual, _ := infoCache.LoadOrStore(t, si)
	return actual.(*structInfo)
}

func parseBound(t reflect.Type, sf reflect.StructField, tag string) *float64 {
	s, ok := sf.Tag.Lookup(tag)
	if !ok {
		return nil
	}
	var v float64
	var err error
	if sf.Type == durationType {
		var d time.Duration
		d, err = time.ParseDuration(s)
		v = float64(d)
	} else {
		v, err = strconv.ParseFloat(s, 64)
	}
	if err != nil {
		panic(fmt.Sprintf("strictyaml: %s.%s: bad %s tag %q", t, sf.Name, tag, s))
	}
	return &v
}

// intRange is the range of an integer kind in float64, as JSON Schema states it.
func intRange(k reflect.Kind) (lo, hi float64) {
	l, h := intLimits(k)
	return float64(l), float64(h)
}

// intLimits is the exact range of an integer kind.
func intLimits(k reflect.Kind) (lo int64, hi uint64) {
	switch k {
	case reflect.Int8:
		return math.MinInt8, math.MaxInt8
	case reflect.Int16:
		return math.MinInt16, math.MaxInt16
	case reflect.Int32:
		return math.MinInt32, math.MaxInt32
	case reflect.Int, reflect.Int64:
		return math.MinInt64, math.MaxInt64
	case reflect.Uint8:
		return 0, math.MaxUint8
	case reflect.Uint16:
		return 0, math.MaxUint16
	case reflect.Uint32:
		return 0, math.MaxUint32
	default:
		return 0, math.MaxUint64
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// firstSentence is the start of a doc string, for hints.
func firstSentence(doc string) string {
	if i := strings.Index(doc, ". "); i >= 0 {
		return doc[:i]
	}
	return strings.TrimSuffix(doc, ".")
}
