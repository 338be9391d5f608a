package cert

import (
	"bytes"
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CAConfigMapKey is the key of the CA bundle in the ConfigMap PublishCA
// writes (the name clients mount it under).
const CAConfigMapKey = "ca.crt"

// PublishCA sets caPEM as key ca.crt of the ConfigMap namespace/name,
// creating the ConfigMap when absent. It writes only when the bundle
// differs, and retries on conflicts, so replicas may all call it.
func PublishCA(ctx context.Context, c client.Client, namespace, name string, caPEM []byte) error {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	racing := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(retry.DefaultRetry, racing, func() error {
		var cm corev1.ConfigMap
		err := c.Get(ctx, key, &cm)
		if apierrors.IsNotFound(err) {
			cm = corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: namespace, Name: name,
					Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/managed-by": "kerf"},
				},
				Data: map[string]string{CAConfigMapKey: string(caPEM)},
			}
			return c.Create(ctx, &cm)
		}
		if err != nil {
			return err
		}
		if cm.Data[CAConfigMapKey] == string(caPEM) {
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[CAConfigMapKey] = string(caPEM)
		// The resourceVersion read above makes the update conditional.
		return c.Update(ctx, &cm)
	})
	if err != nil {
		return fmt.Errorf("publish CA bundle in ConfigMap %s: %w", key, err)
	}
	return nil
}

// PatchCABundle sets caPEM as the caBundle of every webhook of the
// MutatingWebhookConfiguration webhookConfigName. It writes only when a
// caBundle differs, and retries on conflicts, so replicas may all call it.
func PatchCABundle(ctx context.Context, c client.Client, webhookConfigName string, caPEM []byte) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg, err := getConfiguration(ctx, c, webhookConfigName)
		if err != nil {
			return err
		}
		changed := false
		for i := range cfg.Webhooks {
			if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caPEM) {
				cfg.Webhooks[i].ClientConfig.CABundle = caPEM
				changed = true
			}
		}
		if !changed {
			return nil
		}
		return c.Update(ctx, cfg)
	})
	if err != nil {
		return fmt.Errorf("patch caBundle of MutatingWebhookConfiguration %s: %w", webhookConfigName, err)
	}
	return nil
}

func getConfiguration(ctx context.Context, c client.Reader, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}
