// Typed forwarders for OpenSSL's function-like macros (Swift imports functions, not macros that expand to
// SSL_CTX_ctrl(ctx, SSL_CTRL_..., larg, parg) calls), and the option bits built with SSL_OP_BIT(n), which Swift
// cannot import either. Every function is a one-line forwarder; all logic lives in Swift under
// ImageCacheTLS/OpenSSL/. Real OpenSSL functions (SSL_new, SSL_read_ex, BIO_new_bio_pair, ...) are called from
// Swift directly.
#ifndef COSSL_SHIM_PUBLIC_H
#define COSSL_SHIM_PUBLIC_H

#include <openssl/ssl.h>
#include <stdint.h>

/// The server name callback's type (SSL_CTX_set_tlsext_servername_callback): the SSL, the alert to send, the arg.
typedef int (*cossl_servername_cb)(SSL *_Nonnull ssl, int *_Nonnull alert, void *_Nullable arg);

/// SSL_OP_* bits (SSL_OP_BIT(n) in the header).
extern const uint64_t cossl_SSL_OP_NO_COMPRESSION;
extern const uint64_t cossl_SSL_OP_NO_RENEGOTIATION;

long cossl_SSL_CTX_set_mode(SSL_CTX *_Nonnull ctx, long mode);
int cossl_SSL_CTX_set_min_proto_version(SSL_CTX *_Nonnull ctx, int version);
int cossl_SSL_CTX_set_max_proto_version(SSL_CTX *_Nonnull ctx, int version);
long cossl_SSL_CTX_set_session_cache_mode(SSL_CTX *_Nonnull ctx, long mode);
int cossl_SSL_CTX_set1_groups_list(SSL_CTX *_Nonnull ctx, const char *_Nonnull groups);
int cossl_SSL_CTX_add1_chain_cert(SSL_CTX *_Nonnull ctx, X509 *_Nonnull certificate);
long cossl_SSL_CTX_set_tlsext_servername_callback(SSL_CTX *_Nonnull ctx, cossl_servername_cb _Nonnull callback);
int cossl_SSL_set_tlsext_host_name(SSL *_Nonnull ssl, const char *_Nonnull name);
int cossl_BIO_shutdown_wr(BIO *_Nonnull bio);

#endif
