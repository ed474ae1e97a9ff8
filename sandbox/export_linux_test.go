package sandbox

// SpareInitPID waits until d's spare init is made and returns its pid, or
// 0 if there is none (or making it failed).
func SpareInitPID(d *PodDriver) int {
	d.mu.Lock()
	s := d.spare
	d.mu.Unlock()
	if s == nil {
		return 0
	}
	<-s.ready
	if s.p == nil {
		return 0
	}
	return s.p.cmd.Process.Pid
}
