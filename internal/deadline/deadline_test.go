package deadline

import (
	"testing"
	"time"
)

func expiredWithin(d *Deadline, wait time.Duration) bool {
	select {
	case <-d.Expired():
		return true
	case <-time.After(wait):
		return false
	}
}

func TestDeadline(t *testing.T) {
	var d Deadline
	if expiredWithin(&d, 10*time.Millisecond) {
		t.Fatal("zero Deadline expired")
	}
	d.Set(time.Now().Add(-time.Second))
	if !expiredWithin(&d, 10*time.Millisecond) {
		t.Fatal("past deadline not expired")
	}
	d.Set(time.Time{})
	if expiredWithin(&d, 10*time.Millisecond) {
		t.Fatal("cleared deadline still expired")
	}
	// Moving a deadline later: the first timer must not fire.
	d.Set(time.Now().Add(20 * time.Millisecond))
	d.Set(time.Now().Add(150 * time.Millisecond))
	if expiredWithin(&d, 80*time.Millisecond) {
		t.Fatal("the replaced, earlier deadline fired")
	}
	if !expiredWithin(&d, time.Second) {
		t.Fatal("the later deadline never fired")
	}
	d.Set(time.Now().Add(time.Hour))
	d.Stop()
}
