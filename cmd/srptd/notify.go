package main

import (
	"log/slog"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
)

// notify sends state to the service manager (sd_notify(3)) when srptd
// runs under systemd with Type=notify (NOTIFY_SOCKET set): READY=1 once
// every port listens, RELOADING=1 and READY=1 around a SIGHUP reload,
// STOPPING=1 at shutdown. Without NOTIFY_SOCKET it does nothing.
func notify(log *slog.Logger, state string) {
	if _, err := sdnotify.SdNotify(false, state); err != nil {
		log.Warn("sd_notify failed", "state", state, "err", err)
	}
}
