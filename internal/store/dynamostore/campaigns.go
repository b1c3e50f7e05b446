package dynamostore

import (
	"context"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// campaignsPK is the partition of the tenantJobs index holding every
// campaign record (the index is overloaded: job entries are under
// TENANT#<tenant>), so that listing all tenants' campaigns is a Query.
const campaignsPK = "CAMPAIGNS"

func campaignItem(c store.Campaign) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		attrPK: attrS(tenantPK(c.Tenant)), attrSK: attrS(skCampaign + c.ID),
		"tenant": attrS(c.Tenant), "id": attrS(c.ID),
		"maxDelay": attrN(int64(c.MaxDelaySec)), "enabled": attrBool(c.Enabled),
		"g1pk": attrS(campaignsPK), "g1sk": attrS(c.Tenant + "#" + c.ID),
	}
	for name, v := range map[string]string{"name": c.Name, "schedule": c.Schedule, "mode": c.Mode, "source": c.Source, "createdBy": c.CreatedBy, "timezone": c.Timezone} {
		if v != "" {
			m[name] = attrS(v)
		}
	}
	for name, t := range map[string]int64{"lastFiredAt": nanos(c.LastFiredAt), "createdAt": nanos(c.CreatedAt), "updatedAt": nanos(c.UpdatedAt)} {
		if t != 0 {
			m[name] = attrN(t)
		}
	}
	if len(c.Request) > 0 {
		m["request"] = &types.AttributeValueMemberB{Value: c.Request}
	}
	return m
}

func campaignFrom(m map[string]types.AttributeValue) store.Campaign {
	c := store.Campaign{
		Tenant: getS(m, "tenant"), ID: getS(m, "id"), Name: getS(m, "name"), Schedule: getS(m, "schedule"), Timezone: getS(m, "timezone"),
		Mode: getS(m, "mode"), Source: getS(m, "source"), MaxDelaySec: int(getN(m, "maxDelay")),
		Enabled: getBool(m, "enabled"), LastFiredAt: fromNanos(getN(m, "lastFiredAt")),
		CreatedBy: getS(m, "createdBy"), CreatedAt: fromNanos(getN(m, "createdAt")), UpdatedAt: fromNanos(getN(m, "updatedAt")),
	}
	if b, ok := m["request"].(*types.AttributeValueMemberB); ok {
		c.Request = b.Value
	}
	return c
}

// PutCampaign writes the campaign record (TENANT#<tenant>, CAMPAIGN#<id>).
func (s *Store) PutCampaign(ctx context.Context, c store.Campaign) (store.Campaign, error) {
	if c.Tenant == "" || c.ID == "" {
		return store.Campaign{}, fmt.Errorf("put campaign: %w: empty tenant or id", store.ErrInvalidArgument)
	}
	if c.MaxDelaySec < 0 {
		return store.Campaign{}, fmt.Errorf("put campaign %q: %w: negative max delay", c.ID, store.ErrInvalidArgument)
	}
	item := campaignItem(c)
	if err := s.putItem(ctx, item, "", nil, nil); err != nil {
		return store.Campaign{}, fmt.Errorf("put campaign %s/%s: %w", c.Tenant, c.ID, err)
	}
	return campaignFrom(item), nil
}

// GetCampaign reads one campaign record.
func (s *Store) GetCampaign(ctx context.Context, tenant, id string) (store.Campaign, error) {
	rec, err := s.getItem(ctx, tenantPK(tenant), skCampaign+id)
	if err != nil {
		return store.Campaign{}, fmt.Errorf("get campaign %s/%s: %w", tenant, id, err)
	}
	if rec == nil {
		return store.Campaign{}, fmt.Errorf("campaign %s/%s: %w", tenant, id, store.ErrNotFound)
	}
	return campaignFrom(rec), nil
}

// ListCampaigns queries the tenant's partition for CAMPAIGN# records (they
// sort by id); for all tenants it queries the CAMPAIGNS partition of the
// tenantJobs index and reads the records (a rare, operator-scale listing).
func (s *Store) ListCampaigns(ctx context.Context, tenant string) ([]store.Campaign, error) {
	var (
		recs []map[string]types.AttributeValue
		err  error
	)
	if tenant != "" {
		recs, err = s.query(ctx, &dynamodb.QueryInput{
			KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": attrS(tenantPK(tenant)), ":sk": attrS(skCampaign),
			},
			ConsistentRead: aws.Bool(true),
		}, 0)
	} else {
		recs, err = s.queryKeys(ctx, &dynamodb.QueryInput{
			IndexName:              aws.String(indexTenantJobs),
			KeyConditionExpression: aws.String("g1pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": attrS(campaignsPK),
			},
		})
	}
	if err != nil {
		return nil, fmt.Errorf("list campaigns: %w", err)
	}
	out := make([]store.Campaign, 0, len(recs))
	for _, r := range recs {
		out = append(out, campaignFrom(r))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// DeleteCampaign deletes the record on condition it exists.
func (s *Store) DeleteCampaign(ctx context.Context, tenant, id string) error {
	err := s.deleteItem(ctx, tenantPK(tenant), skCampaign+id, "attribute_exists(pk)")
	if isConditionFailed(err) {
		return fmt.Errorf("campaign %s/%s: %w", tenant, id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete campaign %s/%s: %w", tenant, id, err)
	}
	return nil
}
