package app

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
)

// healthcheckCommand asks the local serve process whether it is ready: the
// container image has no shell and no curl, so its health check runs the
// binary itself. Hidden: it is for the image, not for people.
func healthcheckCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:    "healthcheck [--path /readyz]",
		Short:  "Exit 0 when the serve process on HTTP_ADDR answers 200 on path",
		Args:   noArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return fmt.Errorf("configuration:\n%w", err)
			}
			_, port, err := net.SplitHostPort(cfg.HTTPAddr)
			if err != nil {
				return fmt.Errorf("HTTP_ADDR %q: %w", cfg.HTTPAddr, err)
			}
			client := &http.Client{Timeout: 3 * time.Second}
			resp, err := client.Get("http://" + net.JoinHostPort("127.0.0.1", port) + path)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s answered %d", path, resp.StatusCode)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "path", "/readyz", "the path to ask")
	return cmd
}
