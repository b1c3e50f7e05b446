package devstack

import (
	"context"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/campaign/httpsource"
)

// CampaignTick is how often the local runtime looks for due campaign
// firings: the stand-in for the campaigns' EventBridge rules, which fire
// at whole minutes.
const CampaignTick = time.Second

// newCampaigns builds the campaign core of the local stack: jobs through
// the stack's submitter, requery recipients over HTTPS, skips alerted.
func (s *Stack) newCampaigns() *campaign.Campaigns {
	return &campaign.Campaigns{
		Store: s.Store, Submitter: s.Submitter, Source: httpsource.New(httpsource.Config{AllowPrivate: s.Config.AllowPrivateURLs}),
		Clock: s.Submitter.Clock, Alerts: s.Submitter.Alerts, Log: s.Log,
	}
}

// fireCampaigns fires due campaigns at every tick until ctx is done
// (campaign.Campaigns.FireDue: the latest due firing of each campaign;
// missed earlier ones are skipped, with alerts when late).
func (s *Stack) fireCampaigns(ctx context.Context, tick <-chan time.Time) {
	for {
		if _, err := s.Campaigns.FireDue(ctx); err != nil && ctx.Err() == nil {
			s.Log.Error("campaign firings failed", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}
