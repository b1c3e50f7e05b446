package sender

import (
	"testing"
	"time"
)

func TestBackoffFullJitter(t *testing.T) {
	base, cap := time.Second, 30*time.Second
	tests := []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0.999999, 999999 * time.Microsecond}, // < base
		{1, 0, 0},
		{2, 0.5, time.Second},       // half of 2 s
		{3, 0.5, 2 * time.Second},   // half of 4 s
		{5, 0.5, 8 * time.Second},   // half of 16 s
		{6, 0.5, 15 * time.Second},  // 32 s capped to 30 s
		{60, 0.5, 15 * time.Second}, // no overflow
		{0, 0.5, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := Backoff(base, cap, tt.attempt, tt.r); got != tt.want {
			t.Errorf("Backoff(attempt %d, r %v) = %v, want %v", tt.attempt, tt.r, got, tt.want)
		}
	}
}
