package connectors

// Stall makes d act like an instance that stalls in the middle of its sends
// (a frozen process, a lost connection): it stops signalling progress to
// JetStream and, with claims, stops renewing its send claims too, until
// resume is called. Call it before Run, or during a send to make the
// instance stop there (the renewals already under way still land).
func Stall(d *Dispatcher, claims bool) (resume func()) {
	d.stall.signals.Store(true)
	d.stall.claims.Store(claims)
	return func() {
		d.stall.signals.Store(false)
		d.stall.claims.Store(false)
	}
}
