package bolt

import (
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/svc-dev/svc/internal/account"
)

// LoadAccounts reads every account record.
func (s *Store) LoadAccounts() (account.Records, error) {
	r := account.Records{LastUsed: map[string]time.Time{}}
	err := s.db.View(func(tx *bbolt.Tx) error {
		if err := eachJSON(tx, bucketOrgs, func(o account.Org) { r.Orgs = append(r.Orgs, o) }); err != nil {
			return err
		}
		if err := eachJSON(tx, bucketUsers, func(u account.User) { r.Users = append(r.Users, u) }); err != nil {
			return err
		}
		if err := eachJSON(tx, bucketMembers, func(m account.Member) { r.Members = append(r.Members, m) }); err != nil {
			return err
		}
		if err := eachJSON(tx, bucketKeys, func(k account.Key) { r.Keys = append(r.Keys, k) }); err != nil {
			return err
		}
		if err := eachJSON(tx, bucketWorkerTokens, func(t account.WorkerToken) { r.WorkerTokens = append(r.WorkerTokens, t) }); err != nil {
			return err
		}
		return tx.Bucket(bucketLastUsed).ForEach(func(k, v []byte) error {
			var t time.Time
			if err := t.UnmarshalBinary(v); err != nil {
				return err
			}
			r.LastUsed[string(k)] = t
			return nil
		})
	})
	return r, err
}

// WriteAccounts runs fn in one read-write transaction.
func (s *Store) WriteAccounts(fn func(account.Writer) error) error {
	return s.db.Update(func(tx *bbolt.Tx) error { return fn(accountWriter{tx}) })
}

type accountWriter struct{ tx *bbolt.Tx }

func (w accountWriter) PutOrg(o account.Org) error {
	return putJSON(w.tx.Bucket(bucketOrgs), []byte(o.ID), o)
}

func (w accountWriter) PutUser(u account.User) error {
	return putJSON(w.tx.Bucket(bucketUsers), []byte(u.ID), u)
}

func memberKey(orgID, userID string) []byte { return []byte(orgID + "/" + userID) }

func (w accountWriter) PutMember(m account.Member) error {
	return putJSON(w.tx.Bucket(bucketMembers), memberKey(m.OrgID, m.UserID), m)
}

func (w accountWriter) DeleteMember(orgID, userID string) error {
	return w.tx.Bucket(bucketMembers).Delete(memberKey(orgID, userID))
}

func (w accountWriter) PutKey(k account.Key) error {
	return putJSON(w.tx.Bucket(bucketKeys), []byte(k.ID), k)
}

func (w accountWriter) PutWorkerToken(t account.WorkerToken) error {
	return putJSON(w.tx.Bucket(bucketWorkerTokens), []byte(t.ID), t)
}

func (w accountWriter) PutLastUsed(prefix string, t time.Time) error {
	v, err := t.MarshalBinary()
	if err != nil {
		return err
	}
	return w.tx.Bucket(bucketLastUsed).Put([]byte(prefix), v)
}
