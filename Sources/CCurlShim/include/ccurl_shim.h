// Typed forwarders for libcurl's variadic functions (Swift does not import C variadics).
// Every function is a one-line forwarder; all logic lives in Swift under ImageCacheUpstream/Curl/.
#ifndef CCURL_SHIM_PUBLIC_H
#define CCURL_SHIM_PUBLIC_H

#include <curl/curl.h>
#include <sys/socket.h>

typedef size_t (*ccurl_data_cb)(char *_Nonnull ptr, size_t size, size_t nmemb, void *_Nullable userdata);
typedef curl_socket_t (*ccurl_opensocket_cb)(void *_Nullable clientp, curlsocktype purpose, struct curl_sockaddr *_Nonnull address);
typedef int (*ccurl_xferinfo_cb)(void *_Nullable clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
typedef int (*ccurl_prereq_cb)(void *_Nullable clientp, char *_Nonnull primary_ip, char *_Nonnull local_ip, int primary_port, int local_port);

CURLcode ccurl_easy_setopt_long(CURL *_Nonnull handle, CURLoption option, long value);
CURLcode ccurl_easy_setopt_off_t(CURL *_Nonnull handle, CURLoption option, curl_off_t value);
CURLcode ccurl_easy_setopt_string(CURL *_Nonnull handle, CURLoption option, const char *_Nullable value);
CURLcode ccurl_easy_setopt_ptr(CURL *_Nonnull handle, CURLoption option, void *_Nullable value);
CURLcode ccurl_easy_setopt_slist(CURL *_Nonnull handle, CURLoption option, struct curl_slist *_Nullable value);
CURLcode ccurl_easy_setopt_data_cb(CURL *_Nonnull handle, CURLoption option, ccurl_data_cb _Nonnull callback);
CURLcode ccurl_easy_setopt_opensocket_cb(CURL *_Nonnull handle, ccurl_opensocket_cb _Nonnull callback);
CURLcode ccurl_easy_setopt_xferinfo_cb(CURL *_Nonnull handle, ccurl_xferinfo_cb _Nonnull callback);
CURLcode ccurl_easy_setopt_prereq_cb(CURL *_Nonnull handle, ccurl_prereq_cb _Nonnull callback);

CURLcode ccurl_easy_getinfo_long(CURL *_Nonnull handle, CURLINFO info, long *_Nonnull value);
CURLcode ccurl_easy_getinfo_off_t(CURL *_Nonnull handle, CURLINFO info, curl_off_t *_Nonnull value);
CURLcode ccurl_easy_getinfo_string(CURL *_Nonnull handle, CURLINFO info, const char *_Nullable *_Nonnull value);
CURLcode ccurl_easy_getinfo_ptr(CURL *_Nonnull handle, CURLINFO info, void *_Nullable *_Nonnull value);
CURLcode ccurl_easy_getinfo_socket(CURL *_Nonnull handle, CURLINFO info, curl_socket_t *_Nonnull value);

CURLMcode ccurl_multi_setopt_long(CURLM *_Nonnull multi, CURLMoption option, long value);
CURLSHcode ccurl_share_setopt_long(CURLSH *_Nonnull share, CURLSHoption option, long value);

#endif
