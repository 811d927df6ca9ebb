//go:build tools

// Package tools pins the commands the lab builds.
package tools

import (
	_ "github.com/bitnami-labs/sealed-secrets/cmd/controller"
	_ "github.com/bitnami-labs/sealed-secrets/cmd/kubeseal"
)
