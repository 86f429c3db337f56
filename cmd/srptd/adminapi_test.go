package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gosrp/gosrp/internal/adminapi"
	"github.com/gosrp/gosrp/srp/target"
)

// jsonKeys returns the JSON keys of struct type t.
func jsonKeys(t reflect.Type) map[string]bool {
	keys := map[string]bool{}
	for f := range t.Fields() {
		k, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if k == "" {
			k = f.Name
		}
		keys[k] = true
	}
	return keys
}

// TestAdminAPITypesComplete: the admin API's request and response types
// carry every key of what they stand for: POST /luns every key of a
// [[lun]] section, POST /acls every key of an [[acl]] section, GET
// /sessions every counter of the target's SessionInfo (under its Go
// name).
func TestAdminAPITypesComplete(t *testing.T) {
	for _, c := range []struct {
		api, of reflect.Type
	}{
		{reflect.TypeFor[adminapi.NewLUN](), reflect.TypeFor[LUNSection]()},
		{reflect.TypeFor[adminapi.ACL](), reflect.TypeFor[ACLSection]()},
		{reflect.TypeFor[adminapi.Session](), reflect.TypeFor[target.SessionInfo]()},
	} {
		have := jsonKeys(c.api)
		for k := range jsonKeys(c.of) {
			if !have[k] {
				t.Errorf("%v has no key %q of %v", c.api, k, c.of)
			}
		}
	}
}
