// Package deploy holds no code: its tests check the systemd units, the
// environment files and the release configuration kept beside it.
package deploy
