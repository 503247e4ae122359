package daemon

import (
	"github.com/obmd/obmd/bastion/access/sessions"
	"github.com/obmd/obmd/bastion/internal/metrics"
)

// pullMetrics adds to d.metrics what GET /metrics reads at each scrape:
// sessions, console-hub, SSH door and database figures, kept by their
// owners (power and auth counters are pushed to it by theirs). It reads
// them once now (metrics.Registry.Pull), so it runs once the doors are
// built.
func (d *Daemon) pullMetrics() error {
	return d.metrics.Pull(func(w *metrics.Writer) {
		counts := d.reg.Count()
		for _, kind := range []sessions.Kind{sessions.KindConsole, sessions.KindExec, sessions.KindHTTPConsole, sessions.KindWeb} {
			w.Gauge("obmd_sessions_open", "Live sessions by kind.", float64(counts[kind]), "kind", string(kind))
		}
		w.Gauge("obmd_sessions_unwinding", "Sessions cut whose work has not stopped yet (they hold no session slot and are not listed).",
			float64(d.reg.Unwinding()))
		st := d.consoles.Stats()
		const linksHelp = "BMC console links by state (up: console open; down: opening or reconnecting)."
		w.Gauge("obmd_console_links", linksHelp, float64(st.LinksUp), "state", "up")
		w.Gauge("obmd_console_links", linksHelp, float64(st.Links-st.LinksUp), "state", "down")
		const capturedHelp = "Console links held open for capture (capture always), by state (up: console open; down: opening or reconnecting)."
		w.Gauge("obmd_console_captured_links", capturedHelp, float64(st.CapturedUp), "state", "up")
		w.Gauge("obmd_console_captured_links", capturedHelp, float64(st.CapturedDown), "state", "down")
		w.Counter("obmd_console_capture_handoffs_total", "Captured console links this replica gave up for a replica short of its share to capture (rebalancing).",
			float64(st.HandOffs))
		d.history.metrics(w)
		w.Gauge("obmd_console_viewers", "Attached console viewers.", float64(st.Viewers))
		w.Counter("obmd_console_opens_total", "BMC consoles opened.", float64(st.Opens))
		w.Counter("obmd_console_open_errors_total", "Failed attempts to open a BMC console.", float64(st.OpenErrors))
		w.Counter("obmd_console_reconnects_total", "Established console links lost while in use.", float64(st.Reconnects))
		const bytesHelp = "Console bytes by direction (out: from the BMC; in: to it)."
		w.Counter("obmd_console_bytes_total", bytesHelp, float64(st.BytesOut), "direction", "out")
		w.Counter("obmd_console_bytes_total", bytesHelp, float64(st.BytesIn), "direction", "in")
		w.Counter("obmd_console_viewer_overflows_total", "Times a slow viewer's queue overflowed.", float64(st.Overflows))
		w.Counter("obmd_console_skipped_bytes_total", "Console bytes slow viewers skipped.", float64(st.Skipped))
		w.Counter("obmd_console_screen_rebuilds_total", "Times a node's screen fell behind its output and was rebuilt from its history.",
			float64(st.ScreenRebuilds))
		pre := d.ssh.PreauthStats()
		w.Gauge("obmd_ssh_connections", "Open SSH connections, authenticated or not.", float64(pre.Conns))
		w.Gauge("obmd_ssh_unauthenticated", "SSH connections that have not authenticated yet.", float64(pre.Open))
		const closedHelp = "SSH connections closed before authenticating, by reason (grace: ssh.login_grace_time passed; displaced: by a newer connection at a cap; refused: the address at ssh.max_conns_per_source, or obmd at ssh.max_conns, all authenticated)."
		w.Counter("obmd_ssh_unauthenticated_closed_total", closedHelp, float64(pre.Expired), "reason", "grace")
		w.Counter("obmd_ssh_unauthenticated_closed_total", closedHelp, float64(pre.Displaced), "reason", "displaced")
		w.Counter("obmd_ssh_unauthenticated_closed_total", closedHelp, float64(pre.Refused), "reason", "refused")
		w.Counter("obmd_db_conflict_retries_total", "Database writes run again after a deadlock or lock wait timeout (on Galera: a lost certification).",
			float64(d.store.ConflictRetries()))
		for zone, n := range d.rep.zones.replicas() {
			w.Gauge("obmd_cluster_zone_replicas", "Live replicas that reach each zone the nodes name (0: its nodes' consoles are not served), as of the last capture poll.",
				float64(n), "zone", zone)
		}
		w.Gauge("obmd_auth_limiter_entries", "Sources, nodes and (node, source) pairs the guessing limiter tracks.", float64(d.limiter.Tracked()))
	})
}
