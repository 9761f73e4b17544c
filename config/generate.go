package config

// docs/configuration.md is generated from Settings and SDKSettings; a test
// in ./gen fails when it is out of date.
//go:generate go run ./gen -o ../docs/configuration.md
