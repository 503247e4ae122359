package sol

// CONTRACT (to be implemented): the console hub.
//
//	type Config struct {
//		Scrollback  int           // bytes of scrollback per node (default 16 KiB)
//		Linger      time.Duration // keep a link open this long after the last viewer leaves (default 2 s)
//		QueueBytes  int           // per-viewer output queue bound (default 256 KiB); overflow -> gap
//		DropSlow    bool          // disconnect a viewer on overflow instead of skipping ahead
//		Keepalive   time.Duration // idle time after which the link probes the BMC (default 10 s)
//		OpenTimeout time.Duration // bound on one OpenConsole call (default 10 s)
//		Backoff     struct{ Min, Max time.Duration } // reconnect backoff (default 250 ms .. 10 s, with jitter)
//		Now         func() time.Time
//	}
//	func NewManager(cfg Config, r Resolver, log logrus.FieldLogger) *Manager
//
//	// Attach subscribes a viewer to label's console, opening the link if this
//	// is the first viewer. ctx bounds only the attach itself.
//	func (m *Manager) Attach(ctx context.Context, label string, o AttachOptions) (*Viewer, error)
//	type AttachOptions struct {
//		Name     string // who, for banners and `sessions` ("user@addr #id")
//		ReadOnly bool   // never becomes writer by itself (console --read-only)
//		Replay   bool   // first output is the scrollback (SSH: yes; HTTP: no)
//	}
//	// Viewers lists who is attached (for banners and the `sessions` command).
//	func (m *Manager) Viewers(label string) []ViewerInfo
//	// Scrollback copies the node's scrollback (console-log).
//	func (m *Manager) Scrollback(label string) []byte
//	// Cut ends every viewer of label with cause, wipes its scrollback and
//	// closes the link at once (no linger). Returns after they are told.
//	func (m *Manager) Cut(label string, cause error)
//	// Close ends all viewers (cause ErrShutdown), deactivates all links and
//	// waits for their goroutines, bounded by ctx.
//	func (m *Manager) Close(ctx context.Context) error
//
//	type Viewer
//	func (v *Viewer) Output() <-chan Chunk   // closed when the viewer ends
//	func (v *Viewer) Done() <-chan struct{}
//	func (v *Viewer) Err() error             // cause, after Done
//	func (v *Viewer) Write(p []byte) (int, error) // to the BMC; ErrReadOnly unless writer
//	func (v *Viewer) TakeWrite()             // become writer; previous writer gets a Notice
//	func (v *Viewer) ReadOnly()              // give up writing
//	func (v *Viewer) Writer() bool
//	func (v *Viewer) Break(ctx context.Context) error
//	func (v *Viewer) Close()                 // detach; idempotent
//
//	type Chunk struct {
//		Data   []byte // console bytes, untouched
//		Notice string // a one-line message for the viewer (stderr), e.g. "console link lost, reconnecting"
//		Skipped int   // >0: this many bytes were dropped before Data because the viewer was slow
//	}
