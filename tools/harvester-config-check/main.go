// harvester-config-check loads Harvester install configs with harvester-installer's own loader
// (pkg/config.LoadHarvesterConfig, the function the installer runs on a remote config) and
// prints, per file, "ok <path>" and the loaded config as JSON with secrets masked, or
// "error <path>: <reason>". It exits 1 when any file is rejected.
//
// Beyond the loader it checks what a joining node cannot do without: a token, an https
// server_url, mode join, and, when a management network is given, a MAC per interface.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/harvester/harvester-installer/pkg/config"
)

func check(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	cfg, err := config.LoadHarvesterConfig(raw)
	if err != nil {
		return "", fmt.Errorf("loader: %w", err)
	}
	if cfg.Token == "" {
		return "", fmt.Errorf("no token")
	}
	if !strings.HasPrefix(cfg.ServerURL, "https://") {
		return "", fmt.Errorf("server_url %q is not https", cfg.ServerURL)
	}
	if cfg.Install.Mode != "join" {
		return "", fmt.Errorf("install.mode is %q, want join", cfg.Install.Mode)
	}
	for i, iface := range cfg.Install.ManagementInterface.Interfaces {
		if iface.HwAddr == "" && iface.Name == "" {
			return "", fmt.Errorf("install.management_interface.interfaces[%d] has neither hwAddr nor name", i)
		}
	}
	cfg.Token = "***"
	cfg.Password = "***"
	out, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: harvester-config-check FILE...")
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		loaded, err := check(path)
		if err != nil {
			fmt.Printf("error %s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("ok %s %s\n", path, loaded)
	}
	if failed {
		os.Exit(1)
	}
}
