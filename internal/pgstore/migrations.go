package pgstore

// migrations run in order at start-up, each in the transaction that
// records it; append, never edit. minReader is the oldest build (by
// schema version) that can still use the database once the migration ran;
// zero leaves it where it was.
func migrations() []migration {
	return []migration{
		{version: 1, minReader: 1, name: "accounts, rentals, rent limits, replicas, leader lease", sql: schemaCore},
		{version: 2, name: "usage log and totals, worker events, power history", sql: schemaLogs},
		{version: 3, name: "organisation homes", sql: schemaHomes},
		{version: 4, name: "peers a replica cannot reach", sql: schemaPeers},
		{version: 5, name: "replica regions, stopping replicas", sql: schemaRegions},
		{version: 6, minReader: 6, name: "rentals run by each organisation's home", sql: schemaRentalOrgs},
		{version: 7, minReader: 7, name: "seconds of audio speech requests made", sql: schemaSpeechSeconds},
		{version: 8, name: "worker events by worker", sql: schemaWorkerEvents},
		{version: 9, name: "speech rows' seconds from builds before 7", run: moveSpeechSeconds},
		{version: 10, name: "each replica's usage retention", sql: schemaReplicaRetention},
		{version: 11, name: "tokens of usage rows without energy", sql: schemaUnmeteredTokens},
	}
}
