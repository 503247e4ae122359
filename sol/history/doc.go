// Package history owns a node's console history: recorded per tenancy,
// shared by every replica, written as raw, text or asciicast.
//
// The history is what the node printed and what happened to its console
// (markers: link lost and restored, power and boot-device operations and who
// ran them, the end of a tenancy), kept per tenancy in a Store that every
// replica shares, and written in one of the output formats (raw, text,
// asciicast v2).
//
// A tenancy is the time between two access changes of a node; it is named
// by the node's access epoch at which it began. What a tenant may read is
// the tenancy its session was admitted at and nothing else: every Query
// names its tenancy, and a Store answers a tenant's query only while that
// tenancy is the node's current one, in the same statement that reads it.
//
// The Recorder buffers each recorded node's output and markers, and one
// goroutine of its own writes every node's buffer to the Store in one
// transaction per flush (at most FlushInterval after the first byte, or as
// soon as a node has FlushBytes pending). Writing to it never waits for the
// Store: a node's buffer is bounded, and when the Store is slow or down the
// oldest buffered chunks give way, replaced by one counted marker
// ("history: N bytes not recorded"). Reading merges what is stored with what
// is still buffered, so output shows at once on the replica that records it.
//
// What the daemon calls:
//   - at start New and Start; at shutdown, once the console hub is closed,
//     Close (a last flush);
//   - on the replica holding a node's console link: Open(label, epoch) when
//     the link starts (the node's epoch as this replica has applied it),
//     Recording.Write with every byte the link publishes (where viewers get
//     it), Recording.Mark(LinkLost()) and Mark(LinkRestored()) where
//     viewers are told, Recording.Close when the link ends;
//   - on every replica, for every access change it applies: SetEpoch(label,
//     epoch) where it cuts the node's sessions (it never blocks), then
//     EndTenancies(ctx, label, epoch) outside that (one flush, one
//     transaction);
//   - on the replica running a power or boot-device operation:
//     Mark(label, epoch of the session, Power(op, actor)) or BootDevice;
//   - to serve a history: Read or Follow with the session's admitted epoch,
//     then an Encoder; for attach replay, Cut where the viewer is added
//     (under the lock under which Recording.Write is called, so the replay
//     ends exactly where its live output begins), then Cut.Read outside it.
//
// The package knows nothing of SSH, HTTP or SQL: Store is implemented by
// package db.
package history
