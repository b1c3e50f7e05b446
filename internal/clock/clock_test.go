package clock

import (
	"context"
	"testing"
	"time"
)

func TestFakeAfterFiresWhenTimeMoves(t *testing.T) {
	f := NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ch := f.After(time.Second)
	select {
	case <-ch:
		t.Fatal("fired before the time moved")
	default:
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	_ = f.Sleep(context.Background(), time.Millisecond)
	select {
	case got := <-ch:
		if !got.Equal(f.Now()) {
			t.Fatalf("fired with %v, want %v", got, f.Now())
		}
	default:
		t.Fatal("did not fire at its time")
	}
	select {
	case <-f.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
}
