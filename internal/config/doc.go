// Package config reads slackerd's TOML configuration file and applies defaults. Flags
// given on the command line override the file (cmd/slackerd does that).
package config
