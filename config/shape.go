package config

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkShape compares a YAML node with the Go value it will be decoded
// into and describes each mismatch in the file's terms: its line, the key's
// path and what was expected ("line 7: sources[0].secrets: want a list of
// strings, got a mapping"), instead of the decoder's Go type names. Keys
// the type does not have are reported with the known ones.
func checkShape(n *yaml.Node, v any, path string) []string {
	return shapeOf(n, reflect.TypeOf(v), path)
}

func shapeOf(n *yaml.Node, t reflect.Type, path string) []string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // an empty value keeps the default
	}
	mismatch := func() []string {
		return []string{fmt.Sprintf("line %d: %s: want %s, got %s", n.Line, displayPath(path), describe(t), describeNode(n))}
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return mismatch()
		}
		fields := map[string]reflect.Type{}
		var known []string
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = t.Field(i).Type
				known = append(known, name)
			}
		}
		var errs []string
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			ft, ok := fields[key]
			if !ok {
				errs = append(errs, fmt.Sprintf("line %d: %s: unknown key %q (known: %s)",
					n.Content[i].Line, displayPath(path), key, strings.Join(known, ", ")))
				continue
			}
			errs = append(errs, shapeOf(n.Content[i+1], ft, join(path, key))...)
		}
		return errs
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return mismatch()
		}
		var errs []string
		for i, item := range n.Content {
			errs = append(errs, shapeOf(item, t.Elem(), path+"["+strconv.Itoa(i)+"]")...)
		}
		return errs
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return mismatch()
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return mismatch()
		}
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return mismatch()
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func displayPath(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

func describe(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return "a mapping"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	}
	return "a string"
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if slices.Contains([]string{"!!str", "!!int", "!!float", "!!bool"}, n.Tag) {
		return fmt.Sprintf("%q", n.Value)
	}
	return "a " + strings.TrimPrefix(n.Tag, "!!")
}
