package sol

// ring keeps the last size bytes written to it. Its buffer is allocated on
// the first write, so nodes that print nothing cost nothing. Not safe for
// concurrent use (node.mu guards it).
type ring struct {
	size  int
	buf   []byte
	start int // index of the oldest byte
	n     int // bytes held
}

func (r *ring) write(p []byte) {
	if r.size <= 0 || len(p) == 0 {
		return
	}
	if r.buf == nil {
		r.buf = make([]byte, r.size)
	}
	if len(p) >= r.size {
		copy(r.buf, p[len(p)-r.size:])
		r.start, r.n = 0, r.size
		return
	}
	end := (r.start + r.n) % r.size
	k := copy(r.buf[end:], p)
	copy(r.buf, p[k:])
	r.n += len(p)
	if r.n > r.size {
		r.start = (r.start + r.n - r.size) % r.size
		r.n = r.size
	}
}

// halves returns the held bytes, oldest first, as two slices of the buffer
// (b is empty unless they wrap). They alias the ring: use them before the
// next write.
func (r *ring) halves() (a, b []byte) {
	end := r.start + r.n
	if end <= len(r.buf) {
		return r.buf[r.start:end], nil
	}
	return r.buf[r.start:], r.buf[:end-len(r.buf)]
}

// bytes returns a copy of the held bytes, oldest first.
func (r *ring) bytes() []byte {
	return concat(r.halves())
}

// reset forgets everything and releases the buffer.
func (r *ring) reset() {
	r.buf, r.start, r.n = nil, 0, 0
}
