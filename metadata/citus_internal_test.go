package metadata

import "testing"

// TestCitusSupported: Citus 12 and later are moved on; older releases and
// unreadable versions are refused (the sentence is checkCitusVersion's).
func TestCitusSupported(t *testing.T) {
	for v, want := range map[string]bool{
		"13.2-1": true, "12.0-1": true, "12.1-1": true, "14.0-1": true,
		"11.3-1": false, "10.2-4": false, "9.5-2": false, "": false, "x.y": false,
	} {
		if got := citusSupported(v); got != want {
			t.Errorf("citusSupported(%q) = %t, want %t", v, got, want)
		}
	}
}
