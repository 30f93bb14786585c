#include "cossl_shim.h"

const uint64_t cossl_SSL_OP_NO_COMPRESSION = SSL_OP_NO_COMPRESSION;
const uint64_t cossl_SSL_OP_NO_RENEGOTIATION = SSL_OP_NO_RENEGOTIATION;

long cossl_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
int cossl_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) { return (int)SSL_CTX_set_min_proto_version(ctx, version); }
int cossl_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) { return (int)SSL_CTX_set_max_proto_version(ctx, version); }
long cossl_SSL_CTX_set_session_cache_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_session_cache_mode(ctx, mode); }
int cossl_SSL_CTX_set1_groups_list(SSL_CTX *ctx, const char *groups) { return (int)SSL_CTX_set1_groups_list(ctx, groups); }
int cossl_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *certificate) { return (int)SSL_CTX_add1_chain_cert(ctx, certificate); }
long cossl_SSL_CTX_set_tlsext_servername_callback(SSL_CTX *ctx, cossl_servername_cb callback) { return SSL_CTX_set_tlsext_servername_callback(ctx, callback); }
int cossl_SSL_set_tlsext_host_name(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }
int cossl_BIO_shutdown_wr(BIO *bio) { return BIO_shutdown_wr(bio); }
