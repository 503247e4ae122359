package sol

// DisableScreens turns m's screens off (before anything attaches), for the
// benchmarks that weigh them against the hub without them.
func DisableScreens(m *Manager) { m.noScreens = true }

// ReplaysQueued is how many replays and redraws v has queued.
func ReplaysQueued(v *Viewer) int { return v.replaysQueued() }
