package controlapi

// CountingNet is countingNet for the external tests.
type CountingNet = countingNet

// Dialed is closed when the dial ahead has ended.
func (p *Predialer) Dialed() <-chan struct{} { return p.done }

// Dials is how many dials the network made.
func (n *countingNet) Dials() int32 { return n.dials.Load() }
