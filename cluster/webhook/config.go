package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// WebhookName is the name of the webhook inside the configuration.
const WebhookName = "pods.webhook.kerf.dev"

// OptOutLabel, set to "false" on a namespace or a pod, keeps the webhook
// away from it.
const OptOutLabel = "kerf.dev/inject"

// TimeoutSeconds is how long the apiserver waits for the webhook before it
// admits the pod unchanged.
const TimeoutSeconds = 5

// matchCondition sends the webhook only pods with a controller of a kind
// whose workload Kerf may manage. So an unreachable webhook never slows
// other pods.
const matchCondition = `has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller && r.apiVersion.startsWith('apps/') && r.kind in ['ReplicaSet', 'StatefulSet', 'DaemonSet'])`

// Configuration returns the MutatingWebhookConfiguration that sends pod
// CREATEs to the webhook behind the Service serviceNamespace/serviceName
// (port 443, path Path). It fails open (failurePolicy Ignore,
// timeoutSeconds 5), has no side effects, and leaves alone kube-system,
// Kerf's own namespace, and namespaces and pods labelled
// kerf.dev/inject=false.
func Configuration(name, serviceNamespace, serviceName string, caPEM []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	notOptedOut := metav1.LabelSelectorRequirement{Key: OptOutLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "webhook"},
		},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: WebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{
					Namespace: serviceNamespace,
					Name:      serviceName,
					Path:      ptr.To(Path),
					Port:      ptr.To[int32](443),
				},
				CABundle: caPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{""},
					APIVersions: []string{"v1"},
					Resources:   []string{"pods"},
					Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:   ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem, serviceNamespace}},
				notOptedOut,
			}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notOptedOut}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "has-workload-controller",
				Expression: matchCondition,
			}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}},
	}
}
