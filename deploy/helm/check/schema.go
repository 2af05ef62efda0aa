package main

import (
	"fmt"
	"os"
	"sort"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// loadCRDSchema returns the openAPIV3Schema of VERSION in a
// CustomResourceDefinition file, as its project publishes it.
func loadCRDSchema(path, version string) (map[string]interface{}, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	data, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]interface{} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Schema.OpenAPIV3Schema != nil {
			return v.Schema.OpenAPIV3Schema, nil
		}
	}
	return nil, fmt.Errorf("%s: no schema for version %s", path, version)
}

// validate checks value against a structural schema as the API server
// does, but refusing unknown fields instead of pruning them (the
// server's strict field validation): type, required, enum, properties,
// additionalProperties, items, x-kubernetes-int-or-string and
// x-kubernetes-preserve-unknown-fields.
func validate(at string, schema map[string]interface{}, value interface{}) {
	if value == nil {
		if n, _ := schema["nullable"].(bool); !n {
			fail("%s: null is not allowed", at)
		}
		return
	}
	if ios, _ := schema["x-kubernetes-int-or-string"].(bool); ios {
		switch value.(type) {
		case string, int64, float64:
			return
		}
		fail("%s: want an integer or a string", at)
		return
	}
	if enum, ok := schema["enum"].([]interface{}); ok {
		found := false
		for _, e := range enum {
			found = found || fmt.Sprint(e) == fmt.Sprint(value)
		}
		if !found {
			fail("%s: %v is not one of %v", at, value, enum)
		}
	}
	switch t, _ := schema["type"].(string); t {
	case "object":
		obj, ok := value.(map[string]interface{})
		if !ok {
			fail("%s: want an object", at)
			return
		}
		props, _ := schema["properties"].(map[string]interface{})
		preserve, _ := schema["x-kubernetes-preserve-unknown-fields"].(bool)
		addl, _ := schema["additionalProperties"].(map[string]interface{})
		if req, ok := schema["required"].([]interface{}); ok {
			for _, k := range req {
				if _, ok := obj[fmt.Sprint(k)]; !ok {
					fail("%s: %v is required", at, k)
				}
			}
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k].(map[string]interface{}); ok {
				validate(at+"."+k, ps, obj[k])
			} else if addl != nil {
				validate(at+"."+k, addl, obj[k])
			} else if !preserve {
				fail("%s: unknown field %q", at, k)
			}
		}
	case "array":
		arr, ok := value.([]interface{})
		if !ok {
			fail("%s: want an array", at)
			return
		}
		if items, ok := schema["items"].(map[string]interface{}); ok {
			for i, v := range arr {
				validate(fmt.Sprintf("%s[%d]", at, i), items, v)
			}
		}
	case "string":
		if _, ok := value.(string); !ok {
			fail("%s: want a string, got %v", at, value)
		}
	case "integer":
		switch n := value.(type) {
		case int64:
		case float64:
			if n != float64(int64(n)) {
				fail("%s: want an integer, got %v", at, value)
			}
		default:
			fail("%s: want an integer, got %v", at, value)
		}
	case "number":
		switch value.(type) {
		case int64, float64:
		default:
			fail("%s: want a number, got %v", at, value)
		}
	case "boolean":
		if _, ok := value.(bool); !ok {
			fail("%s: want a boolean, got %v", at, value)
		}
	}
}

// validateObject validates a custom resource: its metadata is the API
// server's (ObjectMeta), not the CRD schema's, and is left out.
func validateObject(name string, schema map[string]interface{}, obj map[string]interface{}) {
	rest := make(map[string]interface{}, len(obj))
	for k, v := range obj {
		if k != "metadata" {
			rest[k] = v
		}
	}
	validate(name, schema, rest)
}
