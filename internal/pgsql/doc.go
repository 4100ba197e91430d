// Package pgsql runs SQL text that shardmover builds from catalogs.
//
// Contract: ExecOne sends exactly one statement through the extended query
// protocol (Parse/Bind/Execute with no parameters). PostgreSQL refuses a
// second statement in one Parse ("cannot insert multiple commands into a
// prepared statement"), so a crafted object name that slipped past quoting
// can never start another statement. ExecEach sends several such statements
// in one round trip, each with its own Parse. pgx's Exec without arguments uses the
// simple protocol, which runs any number of statements: never use it for
// text that holds a catalog name.
package pgsql
