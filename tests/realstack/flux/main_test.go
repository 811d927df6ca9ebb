package main

import (
	"context"
	"encoding/base64"
	"io"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	runtimeclient "github.com/fluxcd/pkg/runtime/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// Port 1 on loopback refuses at once: Flux's flow-control probe fails fast
// and nothing leaves the machine.
const valid = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: not-a-real-token}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

// Flux rejects file references, so this one fails in Flux's code if chosen.
const fileRef = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {client-certificate: /etc/some.crt}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

// The /version probe's key choice must be the one Flux's GetClient makes:
// in each case exactly one candidate key holds a kubeconfig Flux accepts.
func TestKubeconfigBytesPicksTheKeyFluxPicks(t *testing.T) {
	cases := []struct {
		name string
		data map[string]string
		key  string
	}{
		{"value only", map[string]string{"value": valid}, ""},
		{"value.yaml only", map[string]string{"value.yaml": valid}, ""},
		{"value before value.yaml", map[string]string{"value": valid, "value.yaml": fileRef}, ""},
		{"value before value.yaml, value bad", map[string]string{"value": fileRef, "value.yaml": valid}, ""},
		{"named key wins", map[string]string{"value": fileRef, "kc": valid}, "kc"},
		{"named key wins, named bad", map[string]string{"value": valid, "kc": fileRef}, "kc"},
		{"no default key", map[string]string{"kubeconfig": valid}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}, Data: map[string][]byte{}}
			for k, v := range tc.data {
				secret.Data[k] = []byte(v)
			}
			hub := fake.NewClientBuilder().WithObjects(secret).Build()
			ref := &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "s", Key: tc.key}}
			_, _, fluxErr := runtimeclient.NewImpersonator(hub,
				runtimeclient.WithKubeConfig(ref, runtimeclient.KubeConfigOptions{}, "ns", nil)).GetClient(context.Background())

			data, _ := kubeconfigBytes(secret, tc.key)
			ours := data != nil && string(data) == valid
			if flux := fluxErr == nil; flux != ours {
				t.Fatalf("Flux accepted: %v (err %v); probe chose the valid kubeconfig: %v", flux, fluxErr, ours)
			}
		})
	}
}

func TestRedactRemovesTokenAndClientKey(t *testing.T) {
	key := "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZbpVd6r4ZAYnYUTCLKDRIsRoAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n"
	encoded := base64.StdEncoding.EncodeToString([]byte(key))
	kc := "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: tok-1234567890\n    password: hunter2-hunter2\n    client-key-data: " + encoded + "\n"
	secret := &corev1.Secret{Data: map[string][]byte{"value": []byte(kc)}}
	msg := "bad: tok-1234567890 / hunter2-hunter2 / " + encoded + " / MHcCAQEEIBkg4LVWM9nuwNSk3yByxZbpVd6r4ZAYnYUTCLKDRIsRoAoGCCqGSM49 at https://127.0.0.1:6443"
	got := redact(msg, secret)
	for _, s := range []string{"tok-1234567890", "hunter2-hunter2", encoded, "MHcCAQEEIBkg4LV"} {
		if strings.Contains(got, s) {
			t.Fatalf("%q survived redaction: %s", s, got)
		}
	}
	if !strings.Contains(got, "https://127.0.0.1:6443") {
		t.Fatalf("the server address was redacted too: %s", got)
	}
}

func TestRedactUnparsableValueRemovesLongWords(t *testing.T) {
	secret := &corev1.Secret{Data: map[string][]byte{"value": []byte("token: s3cr3t-t0ken: [")}}
	got := redact(`yaml: cannot parse "s3cr3t-t0ken:"`, secret)
	if strings.Contains(got, "s3cr3t-t0ken") {
		t.Fatalf("secret survived: %s", got)
	}
}

func TestParseFlagsNamesTheMissingFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--namespace", "n", "--secret", "s"}, "--kubeconfig is required"},
		{[]string{"--kubeconfig", "k", "--secret", "s"}, "--namespace is required"},
		{[]string{"--kubeconfig", "k", "--namespace", "n"}, "--secret is required"},
		{[]string{"--kubeconfig", "k", "--namespace", "n", "--secret", "s", "extra"}, `unexpected argument "extra"`},
		{[]string{"--kubeconfig", "k", "--namespace", "n", "--secret", "s", "--timeout", "0s"}, "--timeout must be positive"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	o, err := parseFlags([]string{"--kubeconfig", "k", "--namespace", "n", "--secret", "s", "--key", "value"}, io.Discard)
	if err != nil || o.key != "value" || o.secret != "s" {
		t.Fatalf("valid flags: %+v, %v", o, err)
	}
}
