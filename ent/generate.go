// Package ent holds hookledger's generated data layer. Only ent/schema is
// written by hand; run `go tool task generate` after changing a schema.
package ent

//go:generate go tool ent generate --feature sql/upsert,sql/lock,sql/versioned-migration,sql/execquery ./schema
