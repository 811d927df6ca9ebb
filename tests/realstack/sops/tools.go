//go:build tools

// Package tools pins the command the lab builds.
package tools

import (
	_ "github.com/getsops/sops/v3/cmd/sops"
)
