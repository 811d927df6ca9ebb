// flux-kubeconfig loads a spoke kubeconfig Secret from the hub the way Flux's
// kustomize-controller does for spec.kubeConfig.secretRef, then calls the
// spoke with it. It is a lab tool for spokekeeper's tests: it proves that
// Flux's own code accepts the credential spokekeeper committed.
//
// Followed: github.com/fluxcd/kustomize-controller v1.9.6,
// internal/controller/kustomization_controller.go, reconcile(): for a
// Kustomization with spec.kubeConfig set it calls
//
//	runtimeClient.NewImpersonator(r.Client,
//	    runtimeClient.WithKubeConfig(obj.Spec.KubeConfig, r.KubeConfigOpts, obj.GetNamespace(), provider))
//	impersonation.GetClient(ctx)
//
// with provider nil when secretRef is set (getProviderRESTConfigFetcher) and
// r.KubeConfigOpts bound from flags whose defaults are the zero
// KubeConfigOptions (main.go: kubeConfigOpts.BindFlags; insecure exec and
// insecure TLS off). In github.com/fluxcd/pkg/runtime v0.110.3,
// client/impersonator.go, GetClient -> clientForKubeConfig ->
// getRESTConfigFromSecret picks the key (secretRef.key, else "value", else
// "value.yaml") and calls KubeConfigFromBytes (rejects file references), then
// KubeConfig (drops exec and auth-provider, keeps TLS verification) and builds
// a controller-runtime client. This program calls exactly that, with the same
// options, and sends a SelfSubjectReview through the client it returns.
//
// Flux never asks the spoke for /version and GetClient does not expose its
// rest.Config, so the /version probe rebuilds one with the same exported
// functions (KubeConfigFromBytes, KubeConfig) from the Secret bytes Flux read,
// and must see the same identity as Flux's client, or the program fails.
// That probe path is also helm-controller v1.6.4's own for a HelmRelease
// (internal/kube/config.go, ConfigFromSecret: same key order, same two calls).
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	runtimeclient "github.com/fluxcd/pkg/runtime/client"
	"github.com/go-logr/logr"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// result is the one JSON line printed on success.
type result struct {
	GitVersion string   `json:"gitVersion"`
	Username   string   `json:"username"`
	Groups     []string `json:"groups"`
}

type options struct {
	hubKubeconfig string
	namespace     string
	secret        string
	key           string
	timeout       time.Duration
}

const usage = `usage: flux-kubeconfig --kubeconfig HUB_KUBECONFIG --namespace NS --secret NAME [--key K] [--timeout D]

Reads Secret NS/NAME from the hub and builds the spoke client with Flux's own
code, as kustomize-controller v1.9.6 does for spec.kubeConfig.secretRef
{name: NAME, key: K} (no K: Flux's default keys "value", then "value.yaml").
Then calls the spoke: GET /version and a SelfSubjectReview.

On success prints one JSON line to stdout:
  {"gitVersion":"...","username":"...","groups":["..."]}
On failure prints the error to stderr and exits 1.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	// Own flag set: controller-runtime registers --kubeconfig on the global one.
	fs := flag.NewFlagSet("flux-kubeconfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.hubKubeconfig, "kubeconfig", "", "kubeconfig file of the hub cluster, where the Secret is (required)")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the Secret, i.e. of the Kustomization (required)")
	fs.StringVar(&o.secret, "secret", "", "name of the Secret: spec.kubeConfig.secretRef.name (required)")
	fs.StringVar(&o.key, "key", "", "spec.kubeConfig.secretRef.key (optional; empty: Flux's default keys)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "deadline for the whole run")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: all input is given by flags", fs.Arg(0))
	}
	for _, f := range []struct{ name, value string }{
		{"kubeconfig", o.hubKubeconfig}, {"namespace", o.namespace}, {"secret", o.secret},
	} {
		if f.value == "" {
			return o, fmt.Errorf("--%s is required (see --help)", f.name)
		}
	}
	if o.timeout <= 0 {
		return o, errors.New("--timeout must be positive, e.g. 60s")
	}
	return o, nil
}

func main() {
	// controller-runtime warns on stderr when no logger is set; Flux's code logs nothing we need.
	ctrllog.SetLogger(logr.Discard())

	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flux-kubeconfig:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	rec := &secretRecorder{}
	res, err := run(ctx, o, rec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flux-kubeconfig:", redact(err.Error(), rec.secret))
		os.Exit(1)
	}
	line, err := json.Marshal(res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flux-kubeconfig: encoding the result:", err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}

func run(ctx context.Context, o options, rec *secretRecorder) (result, error) {
	hubConfig, err := clientcmd.BuildConfigFromFlags("", o.hubKubeconfig)
	if err != nil {
		return result{}, fmt.Errorf("hub kubeconfig %s: %w", o.hubKubeconfig, err)
	}
	hub, err := ctrl.New(hubConfig, ctrl.Options{})
	if err != nil {
		return result{}, fmt.Errorf("hub client: %w", err)
	}
	rec.Client = hub

	// Exactly kustomize-controller's call for spec.kubeConfig.secretRef.
	ref := &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: o.secret, Key: o.key}}
	var kubeConfigOpts runtimeclient.KubeConfigOptions // kustomize-controller's flag defaults
	impersonation := runtimeclient.NewImpersonator(rec,
		runtimeclient.WithKubeConfig(ref, kubeConfigOpts, o.namespace, nil))
	spoke, _, err := impersonation.GetClient(ctx)
	if err != nil {
		return result{}, fmt.Errorf("Flux's client for the spoke: %w", err)
	}

	review := &authv1.SelfSubjectReview{}
	if err := spoke.Create(ctx, review); err != nil {
		return result{}, fmt.Errorf("SelfSubjectReview through Flux's client: %w", err)
	}
	res := result{
		Username: review.Status.UserInfo.Username,
		Groups:   review.Status.UserInfo.Groups,
	}
	if res.Groups == nil {
		res.Groups = []string{}
	}

	version, err := probeVersion(ctx, rec.secret, o.key, kubeConfigOpts, res.Username)
	if err != nil {
		return result{}, err
	}
	res.GitVersion = version
	return res, nil
}

// probeVersion calls GET /version with a rest.Config built by Flux's exported
// functions from the bytes Flux read, and checks it authenticates as the
// same user as Flux's client did.
func probeVersion(ctx context.Context, secret *corev1.Secret, key string,
	opts runtimeclient.KubeConfigOptions, fluxUser string) (string, error) {
	if secret == nil {
		return "", errors.New("the hub Secret was not recorded (Flux read no Secret)")
	}
	data, name := kubeconfigBytes(secret, key)
	if data == nil {
		return "", errors.New("no kubeconfig key in the Secret, although Flux accepted it")
	}
	parsed, err := runtimeclient.KubeConfigFromBytes(data)
	if err != nil {
		return "", fmt.Errorf("version probe: kubeconfig in key %q: %w", name, err)
	}
	cfg := runtimeclient.KubeConfig(ctx, parsed, opts)

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("version probe client: %w", err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("version probe SelfSubjectReview: %w", err)
	}
	if got := review.Status.UserInfo.Username; got != fluxUser {
		return "", fmt.Errorf("version probe authenticated as %q, Flux's client as %q: key %q is not the one Flux read", got, fluxUser, name)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("discovery client: %w", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("GET /version: %w", err)
	}
	return info.GitVersion, nil
}

// kubeconfigBytes mirrors the key choice of Flux's getRESTConfigFromSecret
// (unexported), only for the /version probe; probeVersion's identity check
// catches a divergence.
func kubeconfigBytes(secret *corev1.Secret, key string) ([]byte, string) {
	if key != "" {
		return secret.Data[key], key
	}
	for _, k := range []string{"value", "value.yaml"} {
		if v := secret.Data[k]; v != nil {
			return v, k
		}
	}
	return nil, ""
}

// secretRecorder is the hub client handed to Flux; it keeps a copy of the
// Secret Flux reads, for the /version probe and for redacting errors.
type secretRecorder struct {
	ctrl.Client
	secret *corev1.Secret
}

func (r *secretRecorder) Get(ctx context.Context, key ctrl.ObjectKey, obj ctrl.Object, opts ...ctrl.GetOption) error {
	err := r.Client.Get(ctx, key, obj, opts...)
	if s, ok := obj.(*corev1.Secret); ok && err == nil {
		r.secret = s.DeepCopy()
	}
	return err
}

// redact removes the Secret's credentials from msg (tokens, passwords,
// client keys as written and as decoded), so none reaches stderr even if a
// library quotes its input in an error. A value that does not parse as a
// kubeconfig has every run of 8 or more non-space characters removed.
func redact(msg string, secret *corev1.Secret) string {
	if secret == nil {
		return msg
	}
	for _, v := range secret.Data {
		for _, s := range sensitive(v) {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}

func sensitive(data []byte) []string {
	var out []string
	cfg, err := clientcmd.Load(data)
	if err != nil {
		for _, field := range strings.FieldsFunc(string(data), func(r rune) bool {
			return strings.ContainsRune(" \t\r\n\"'", r)
		}) {
			if len(field) >= 8 {
				out = append(out, field)
			}
		}
		return out
	}
	for _, user := range cfg.AuthInfos {
		if user == nil {
			continue
		}
		for _, s := range []string{user.Token, user.Password} {
			if s != "" {
				out = append(out, s)
			}
		}
		if len(user.ClientKeyData) > 0 {
			out = append(out, base64.StdEncoding.EncodeToString(user.ClientKeyData))
			for _, line := range strings.Split(string(user.ClientKeyData), "\n") {
				if len(line) >= 8 && !strings.HasPrefix(line, "-----") {
					out = append(out, line)
				}
			}
		}
	}
	return out
}
