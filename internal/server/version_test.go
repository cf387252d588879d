package server

import "testing"

// oldestVersion and newestVersion, which checkSASVersion's message names, bound the
// versions served.
func TestVersionBounds(t *testing.T) {
	if !serviceVersions[oldestVersion] || !serviceVersions[newestVersion] {
		t.Fatalf("bounds %s, %s not served", oldestVersion, newestVersion)
	}
	for v := range serviceVersions {
		if v < oldestVersion || v > newestVersion {
			t.Errorf("version %s outside %s..%s", v, oldestVersion, newestVersion)
		}
	}
}
