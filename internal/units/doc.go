// Package units formats quantities for people: byte counts with binary
// units. It has no state and no dependencies; every package that prints a
// size uses it, so sizes read the same everywhere.
package units
